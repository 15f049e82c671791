"""Suffix drafts without a model: the index's longest match, the continuation's counts and
threshold, the store's budget and tenants under threads, and what the source proposes."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specrun.core.loop import Round
from specrun.core.sampling import SamplingParams
from specrun.core.sequence import Tokens
from specrun.core.suffix import (
    MAX_DEPTH,
    MIN_PROBABILITY,
    SuffixDraft,
    SuffixIndex,
    SuffixStore,
    follow,
    remembering,
)
from specrun.errors import OptionError

GREEDY = SamplingParams()


def naive_match(sequences: list[list[int]], tail: list[int]) -> tuple[int, list[tuple[int, int]]]:
    """The definition: the longest suffix of `tail` (2 to MAX_DEPTH tokens) found in the
    sequences with a token after it, and where each of its occurrences continues (sequence
    number, position), the most recent first."""
    for length in range(min(MAX_DEPTH, len(tail)), 1, -1):
        key = tail[-length:]
        found = [
            (number, end)
            for number, sequence in enumerate(sequences)
            for end in range(length, len(sequence))
            if sequence[end - length : end] == key
        ]
        if found:
            return length, found[::-1]
    return 0, []


def matched(index: SuffixIndex, tail: list[int]) -> tuple[int, list[tuple[int, int]]]:
    """`index.match`, each occurrence by its sequence's number."""
    numbers = {id(sequence): number for number, sequence in index.sequences.items()}
    length, found = index.match(tail)
    return length, [(numbers[id(sequence)], end) for sequence, end in found]


@settings(derandomize=True)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=20), min_size=1, max_size=3),
    st.lists(st.integers(0, 3), min_size=1, max_size=30),
)
def test_the_longest_match_and_its_occurrences_follow_the_definition(sequences, tail):
    """Small alphabets give long and repeated matches; the texts hold fewer positions than a key
    weighs occurrences (CANDIDATES), where the index finds every one."""
    index = SuffixIndex()
    for number, sequence in enumerate(sequences):
        for start in range(0, len(sequence), 7):  # grown piece by piece, as a request's text
            index.extend(number, sequence[start : start + 7])
    index.extend(len(sequences), [])  # an empty sequence indexes nothing
    assert matched(index, tail) == naive_match(sequences, tail)


def test_keys_of_every_length_find_matches_of_every_length():
    rng = random.Random(0)
    text = [rng.randrange(1000) for _ in range(200)]
    index = SuffixIndex()
    index.extend(0, text)
    for length in [2, 3, 5, 8, 13, 16, 17, 23, 24]:
        tail = [-1, *text[100 - length : 100]]  # preceded by a token found nowhere
        assert index.match(tail) == (length, [(index.sequences[0], 100)])
    assert index.match([*text[50:120]])[0] == MAX_DEPTH  # longer matches count as MAX_DEPTH
    assert index.match([-1, -2]) == (0, [])


def test_the_most_frequent_continuation_and_its_threshold():
    a, b, c = [1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3, 7, 8]
    # After [1, 2, 3]: 4 twice, 7 once (2/3); after 4: 5 once, 6 once, and at a tie the first
    # listed (match lists the most recent first).
    assert follow([(a, 3), (b, 3), (c, 3)], 8) == [4, 5]
    assert follow([(b, 3), (a, 3), (c, 3)], 8) == [4, 6]
    assert follow([(a, 3), (b, 3), (c, 3)], 1) == [4]  # the limit
    # Ten different continuations: each 1/10, at the threshold; eleven: below it, no draft.
    tens = [([0, t], 1) for t in range(10)]
    assert MIN_PROBABILITY == 0.1 and len(follow(tens, 4)) == 1
    assert follow([*tens, ([0, 10], 1)], 4) == []
    # The probability is the product of each step's share: sixteen different 4-token texts
    # agree half as much at each step, 1/2, 1/4, 1/8, then 1/16 is below the threshold.
    sixteen = [([(i >> bit) & 1 for bit in range(4)], 0) for i in range(16)]
    assert follow(sixteen, 8) == [0, 0, 0]
    # An answer that ends stays in the share's denominator: one in eleven goes on.
    ended = [([9, 1], 1)] * 10
    assert follow([*ended, ([9, 1, 2], 1)], 8) == [1]
    assert follow([*ended[1:], ([9, 1, 2], 1)], 8) == [1, 2]  # one in ten
    # Overlap: the request's own text goes on with what was drafted (a period of 2).
    assert follow([([5, 6, 5, 6], 2)], 6, overlap=True) == [5, 6, 5, 6, 5, 6]
    assert follow([([5, 6, 5, 6], 2)], 6) == [5, 6]


def test_the_store_keeps_answers_within_its_budget_oldest_out_first():
    store = SuffixStore(budget=30)
    answers = [[100 * i + t for t in range(10)] for i in range(5)]
    for answer in answers[:3]:
        store.add(answer)
    assert store.tokens == 30 and store.answers() == answers[:3]
    store.add(answers[3])
    assert store.tokens == 30 and store.answers() == answers[1:4]
    assert store.match([0, 1, 2]) == (0, [])  # the evicted answer is matched no more
    assert store.match([101, 102])[0] == 2
    store.add(list(range(1000, 1100)))  # longer than the budget: its last 30 tokens
    assert store.answers() == [list(range(1070, 1100))] and store.tokens == 30
    store.add([7, 8])  # too short to hold a key with a continuation
    assert store.answers() == [list(range(1070, 1100))]
    with pytest.raises(OptionError, match="at least 1 token"):
        SuffixStore(budget=0)


def test_tenants_are_kept_apart():
    store = SuffixStore()
    store.add([1, 2, 3, 4, 5], tenant="alice")
    assert store.match([1, 2, 3], "alice")[0] == 3
    assert store.match([1, 2, 3], "bob") == (0, [])
    assert store.match([1, 2, 3]) == (0, [])  # None, the default tenant, is one more
    store.add([1, 2, 3, 9, 9])
    assert follow(store.match([1, 2, 3])[1], 2) == [9, 9]
    assert follow(store.match([1, 2, 3], "alice")[1], 2) == [4, 5]


def test_the_store_under_threads_stays_consistent():
    """Threads adding and matching at once, each tenant's answers unique: afterwards the store
    holds exactly its budget's newest answers, every one matched by its own n-grams, and the
    evicted ones by none."""
    store = SuffixStore(budget=4000)
    added: dict[str, list[list[int]]] = {}
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        rng = random.Random(worker)
        tenant = f"t{worker}"
        added[tenant] = []
        try:
            for _ in range(60):
                answer = [rng.randrange(10**9) for _ in range(rng.randrange(3, 120))]
                store.add(answer, tenant)
                added[tenant].append(answer)
                prefix = answer[: min(5, len(answer) - 1)]
                length, found = store.match(prefix, tenant)
                assert length == len(prefix) and found[0][0] == answer  # its own, just added
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert not errors, errors
    held = {tenant: store.answers(tenant) for tenant in added}
    assert store.tokens == sum(len(a) for answers in held.values() for a in answers)
    assert 4000 - 120 < store.tokens <= 4000
    for tenant, answers in added.items():
        kept = held[tenant]
        assert kept == answers[len(answers) - len(kept) :]  # the newest, in order
        for answer in answers:
            length, found = store.match(answer[:2], tenant)
            assert (length, [s for s, _ in found]) == ((2, [answer]) if answer in kept else (0, []))


def propose(source: SuffixDraft, ctx, n: int = 8) -> list[int]:
    proposal = source.propose(ctx, n, GREEDY, np.random.default_rng(0))
    assert proposal.probs == [None] * len(proposal.tokens)  # point masses
    return proposal.tokens


def test_the_draft_grows_with_the_match():
    """At most as many tokens as the match is long (SuffixDecoding's factor 1), and n."""
    store = SuffixStore()
    store.add(list(range(10, 40)))
    assert propose(SuffixDraft(store), [0, 10, 11]) == [12, 13]
    assert propose(SuffixDraft(store), [0, 10, 11, 12, 13, 14]) == [15, 16, 17, 18, 19]
    assert propose(SuffixDraft(store), [0, *range(10, 30)], 6) == list(range(30, 36))
    assert propose(SuffixDraft(store), [0, 1, 2]) == []


def test_the_longest_match_wins_and_the_own_text_at_equal_length():
    store = SuffixStore()
    store.add([5, 1, 2, 3, 4, 9, 9, 9])
    own = [7, 1, 2, 8, 8, 8, 8]
    # The store matches [5, 1, 2] (three), the text [1, 2] (two): the store's continuation.
    assert propose(SuffixDraft(store), [*own, 5, 1, 2]) == [3, 4, 9]
    # Both match [1, 2] only: the request's own text.
    assert propose(SuffixDraft(store), [*own, 6, 1, 2]) == [8, 8]
    # The own match is longer, but goes on with nothing likely enough (eleven ways, each
    # below the threshold): the store's.
    own = [t for way in range(11) for t in (1, 2, 3, 100 + way)]
    assert propose(SuffixDraft(SuffixStore()), [*own, 0, 1, 2, 3]) == []
    store = SuffixStore()
    store.add([2, 3, 12, 13])
    assert propose(SuffixDraft(store), [*own, 0, 1, 2, 3]) == [12, 13]


def test_a_draft_reads_only_the_new_tokens_and_restarts_on_an_edit():
    store = SuffixStore()
    source = SuffixDraft(store)
    ctx = Tokens([1, 2, 3, 4, 1, 2])
    source.prefill(ctx.but_last())
    assert propose(source, ctx) == [3, 4]
    ctx.extend([3, 4])
    assert propose(source, ctx) == [1, 2, 3, 4]
    edited = [9, 2, 3, 4, 1, 2, 5, 5, 1, 2]  # not an extension: indexed afresh
    assert propose(source, edited) == propose(SuffixDraft(store), edited) == [5, 5]


class Refusing:
    """A constraint that refuses one token, whatever came before."""

    def __init__(self, refused: int) -> None:
        self.refused = refused

    def allows(self, tokens):
        return np.asarray(tokens) != self.refused

    def accept(self, token):
        assert token != self.refused

    def fork(self):
        return self


def test_a_proposal_stops_at_the_first_token_a_constraint_refuses():
    store = SuffixStore()
    store.add([1, 2, 3, 4, 5, 6, 7])
    cut = SuffixDraft(store).propose([0, 1, 2, 3, 4], 8, GREEDY, None, Refusing(7))
    assert cut.tokens == [5, 6] and cut.probs == [None, None]


def rounds(*chunks: tuple[int, ...]):
    for chunk in chunks:
        yield Round(chunk, (False,) * len(chunk), (), 0, 0, 0, 0.0, 0.0, 0.0)


def test_an_answer_joins_the_tenants_store_however_the_generation_ends():
    store = SuffixStore()
    source = SuffixDraft(store)
    assert [e.tokens for e in remembering(rounds((1, 2), (3, 4)), source, "a")] == [
        (1, 2),
        (3, 4),
    ]
    assert store.answers("a") == [[1, 2, 3, 4]] and source.tenant == "a"
    events = remembering(rounds((5, 6), (7,), (8,)), source, "b")
    next(events), next(events)
    events.close()  # the consumer stops early: what was committed is kept
    assert store.answers("b") == [[5, 6, 7]] and store.answers("a") == [[1, 2, 3, 4]]
    # A source without suffix drafts passes the events through and keeps nothing.
    assert [e.tokens for e in remembering(rounds((9, 9, 9)), None, None)] == [(9, 9, 9)]
