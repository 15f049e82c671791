"""Stop strings over committed text (`TextStream`): where the text ends and what is held back,
held round by round to the rule said plainly, whatever the rounds, the tokens' boundaries and
UTF-8 characters split across tokens; and a round's cost, which a stop string's length must not
set."""

from __future__ import annotations

import codecs
import random

import pytest

from specrun.core.text import Detokenizer, Segment, StopStrings, TextStream, ending_stop

# Pieces of a made-up vocabulary: letters the stops are made of, multi-byte characters, and the
# bytes of two of them split across tokens (a character that only the next token completes).
PIECES = [
    b"a",
    b"b",
    b"ab",
    b"ba",
    b"aab",
    "é".encode(),
    "😀".encode(),
    "😀".encode()[:2],
    "😀".encode()[2:],
    "é".encode()[:1],
    "é".encode()[1:],
    b"\xff",  # never valid: U+FFFD
]
LETTERS = ["a", "b", "é", "😀", "\ufffd"]


class Vocabulary:
    def piece(self, token: int) -> bytes:
        return PIECES[token]


def stream(stops: list[str]) -> TextStream:
    return TextStream(Detokenizer(Vocabulary()), stops)  # type: ignore[arg-type]


def shown_by_the_rule(text: str, stops: list[str]) -> tuple[str, bool]:
    """What may be shown of all the text so far: up to the earliest start of a stop string in
    it, if any is; else all but its longest end that some stop string begins with."""
    starts = [text.find(stop) for stop in stops if stop and stop in text]
    if starts:
        return text[: min(starts)], True
    held = max(
        (k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0
    )
    return text[: len(text) - held], False


def characters(segments: list[Segment]) -> list[tuple[str, bool]]:
    return [(char, drafted) for text, drafted in segments for char in text]


@pytest.mark.parametrize("seed", range(300))
def test_each_round_shows_what_the_rule_allows(seed: int) -> None:
    """Random stop strings and rounds: after each round the text shown so far is the rule's, each
    character with the flag of the token that completed it; a stop ends it at once."""
    rng = random.Random(seed)
    stops = ["".join(rng.choices(LETTERS, k=rng.randint(0, 6))) for _ in range(rng.randint(1, 4))]
    text_stream = stream(stops)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    everything: list[tuple[str, bool]] = []  # each character so far, with its token's flag
    shown: list[tuple[str, bool]] = []
    for _ in range(rng.randint(1, 12)):
        tokens = [rng.randrange(len(PIECES)) for _ in range(rng.randint(1, 4))]
        drafted = [rng.random() < 0.5 for _ in tokens]
        for token, flag in zip(tokens, drafted):
            everything += [(char, flag) for char in decoder.decode(PIECES[token])]
        released, stopped = text_stream.feed(tokens, drafted)
        shown += characters(released)
        text = "".join(char for char, _ in everything)
        expected, hit = shown_by_the_rule(text, stops)
        assert (shown, stopped) == (everything[: len(expected)], hit), (stops, text)
        if stopped:  # the stop string named is one of them, and it starts where the text ends
            ended_by = text_stream.ended_by
            assert ended_by in stops and text[len(expected) :].startswith(ended_by)
            return
        assert text_stream.ended_by is None
    shown += characters(text_stream.flush())
    assert shown == everything + [(char, False) for char in decoder.decode(b"", final=True)]


def test_the_earliest_start_wins_among_the_stops_the_text_holds() -> None:
    """Of two stops in the text, the one that starts first cuts it, though the other ends first;
    one that has not ended yet cuts nothing."""
    both = stream(["abba", "bb"])
    assert both.feed([2, 3], [False, True]) == ([], True)  # "abba": starts at 0
    first_only = stream(["abbaa", "bb"])
    assert first_only.feed([2, 3], [False, True]) == ([("a", False)], True)  # "bb" ends first


def test_the_stop_string_named_is_the_one_that_cut_the_text() -> None:
    """Of two stops starting where the text is cut, the one that ended first; read back from
    the rounds' tokens, the stop that the same rounds met (the rounds decide which cuts)."""
    both = stream(["abba", "bb"])
    both.feed([2, 3], [False, True])
    assert both.ended_by == "abba"  # started first, though "bb" ended first
    nested = stream(["ab", "aba"])
    nested.feed([2, 0], [False, False])
    assert nested.ended_by == "ab"

    def read_back(stops: list[str], rounds: list[tuple[int, ...]]) -> str | None:
        return ending_stop(Detokenizer(Vocabulary()), stops, rounds)  # type: ignore[arg-type]

    assert read_back(["abba", "bb"], [(2, 1, 0)]) == "abba"  # "abba" in one round
    assert read_back(["abba", "bb"], [(2,), (1,), (0,)]) == "bb"  # "abb" met "bb" first
    assert read_back(["abba"], [(2,), (1,)]) is None


def test_a_stop_across_rounds_and_a_split_character_is_held_then_cut() -> None:
    emoji = stream(["b😀a"])
    assert emoji.feed([2, 7], [False, False]) == ([("a", False)], False)  # "ab" + half a 😀
    assert emoji.feed([8], [True]) == ([], False)  # "ab😀": "b😀" begins the stop
    assert emoji.feed([1], [False]) == ([("b", False), ("😀", True)], False)  # "b" held
    assert emoji.feed([6, 0], [False, True]) == ([], True)  # "b😀a", from the held "b"


def test_the_matcher_holds_the_longest_end_that_begins_a_stop() -> None:
    stops = StopStrings(["abab", "bba"])
    assert stops.find("xab") is None and stops.held == 2  # "ab" begins "abab"
    assert stops.find("b") is None and stops.held == 2  # "abb": "bb" begins "bba"
    assert stops.find("a") == -2 and stops.held == 3  # "bba" ended, started 2 characters back
