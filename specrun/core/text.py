"""Committed tokens to text: whole UTF-8 characters, and nothing shown that may yet turn out
to be the start of a stop string."""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from specrun.core.model import LanguageModel

Segment = tuple[str, bool]  # (text, came from an accepted draft)


class Detokenizer:
    """Token ids -> text, one token at a time, keeping UTF-8 characters that span tokens whole.
    `shown`: special tokens that render as nothing in text, but whose text this answer keeps
    (a template's call marks, which its parser reads)."""

    def __init__(self, model: LanguageModel, shown: Mapping[int, bytes] | None = None) -> None:
        self._model = model
        self._shown = shown or {}
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        piece = self._shown.get(token) if self._shown else None
        return self._decoder.decode(self._model.piece(token) if piece is None else piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopStrings:
    """The stop strings as one Aho-Corasick automaton, fed the text as it comes. Each character
    costs O(1) amortized whatever the strings' number and length, so a round costs what its new
    text does, not what the held text or the strings do (a check of every string at every
    suffix, each round, was quadratic in a long stop string's length)."""

    def __init__(self, stops: Iterable[str]) -> None:
        # A node is a prefix of some stop string; node 0 the empty one.
        self._next: list[dict[str, int]] = [{}]  # its children, by the character that follows
        self._fallback: list[int] = [0]  # its longest proper suffix that is also a node
        self._depth: list[int] = [0]  # its length
        self._longest: list[int] = [0]  # the longest stop string it ends with; 0: none
        for stop in stops:
            if stop:  # an empty stop string stops nothing
                self._longest[self._insert(stop)] = len(stop)
        self._link()
        self._state = 0  # the longest suffix of the text so far that is a node
        self.found = 0  # the length of the stop string `find` last found

    def _insert(self, stop: str) -> int:
        node = 0
        for char in stop:
            child = self._next[node].get(char)
            if child is None:
                child = len(self._next)
                self._next[node][char] = child
                self._next.append({})
                self._fallback.append(0)
                self._depth.append(self._depth[node] + 1)
                self._longest.append(0)
            node = child
        return node

    def _link(self) -> None:
        """Each node's fallback, shortest nodes first, and the longest stop string it ends with."""
        queue = deque(self._next[0].values())  # their fallback is the root
        while queue:
            node = queue.popleft()
            for char, child in self._next[node].items():
                queue.append(child)
                fallback = self._step(self._fallback[node], char)
                self._fallback[child] = fallback
                self._longest[child] = self._longest[child] or self._longest[fallback]

    def _step(self, node: int, char: str) -> int:
        while node and char not in self._next[node]:
            node = self._fallback[node]
        return self._next[node].get(char, 0)

    @property
    def held(self) -> int:
        """Characters at the end of the text so far that may begin a stop string."""
        return self._depth[self._state]

    def find(self, text: str) -> int | None:
        """Feed `text`: where the earliest-starting stop string that ends in it starts, counted
        from the start of `text` (negative: in the held characters before it), or None; its
        length is `found` (of those starting there, the first to end)."""
        earliest: int | None = None
        state = self._state
        for end, char in enumerate(text, 1):
            state = self._step(state, char)
            if length := self._longest[state]:  # the longest ending here starts first
                start = end - length
                if earliest is None or start < earliest:
                    earliest, self.found = start, length
        self._state = state
        return earliest


@dataclass
class TextStream:
    """Committed tokens -> text, holding back what might be the start of a stop string."""

    detokenizer: Detokenizer
    stop: Sequence[str] = ()
    pending: deque[Segment] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self._stops = StopStrings(self.stop)
        self.ended_by: str | None = None  # the stop string that ended the text, once one has

    def feed(self, tokens: Sequence[int], from_draft: Sequence[bool]) -> tuple[list[Segment], bool]:
        """Return the segments safe to show, and whether a stop string ended the text."""
        held = self._stops.held  # every pending character: the rest was shown
        added: list[str] = []
        for token, drafted in zip(tokens, from_draft):
            piece = self.detokenizer.add(token)
            if piece:
                self.pending.append((piece, drafted))
                added.append(piece)
        if not self.stop:  # nothing to look for, nothing to hold back
            released, self.pending = list(self.pending), deque()
            return released, False
        new = "".join(added)
        start = self._stops.find(new)
        if start is not None:
            pending = "".join(text for text, _ in self.pending)
            self.ended_by = pending[held + start : held + start + self._stops.found]
            released = self._release(held + start)
            self.pending.clear()
            return released, True
        return self._release(held + len(new) - self._stops.held), False

    def flush(self) -> list[Segment]:
        tail = self.detokenizer.flush()
        released = list(self.pending) + ([(tail, False)] if tail else [])
        self.pending.clear()
        return released

    def _release(self, count: int) -> list[Segment]:
        """The first `count` pending characters, taken from the pending segments."""
        released: list[Segment] = []
        while count > 0:
            text, drafted = self.pending[0]
            if len(text) > count:
                released.append((text[:count], drafted))
                self.pending[0] = (text[count:], drafted)
                break
            released.append(self.pending.popleft())
            count -= len(text)
        return released


def ending_stop(
    detokenizer: Detokenizer, stops: Sequence[str], rounds: Iterable[Sequence[int]]
) -> str | None:
    """The stop string that ended a generation's text, read again from the tokens each of its
    rounds committed (a stop string's text never reaches the answer); None where none did."""
    stream = TextStream(detokenizer, stops)
    for tokens in rounds:
        if stream.feed(tokens, [False] * len(tokens))[1]:
            return stream.ended_by
    return None
