"""Committed tokens to text: whole UTF-8 characters, and nothing shown that may yet turn out
to be the start of a stop string."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass, field

from specrun.core.model import LanguageModel

Segment = tuple[str, bool]  # (text, came from an accepted draft)


class Detokenizer:
    """Token ids -> text, one token at a time, keeping UTF-8 characters that span tokens whole."""

    def __init__(self, model: LanguageModel) -> None:
        self._model = model
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        return self._decoder.decode(self._model.piece(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


@dataclass
class TextStream:
    """Committed tokens -> text, holding back what might be the start of a stop string."""

    detokenizer: Detokenizer
    stop: Sequence[str] = ()
    pending: list[Segment] = field(default_factory=list)

    def feed(self, tokens: Sequence[int], from_draft: Sequence[bool]) -> tuple[list[Segment], bool]:
        """Return the segments safe to show, and whether a stop string ended the text."""
        for token, drafted in zip(tokens, from_draft):
            piece = self.detokenizer.add(token)
            if piece:
                self.pending.append((piece, drafted))
        if not self.stop:  # nothing to look for, nothing to hold back
            released, self.pending = self.pending, []
            return released, False
        text = "".join(piece for piece, _ in self.pending)
        hits = [text.find(s) for s in self.stop if s and s in text]
        if hits:
            released, _ = _split(self.pending, min(hits))
            self.pending = []
            return released, True
        hold = max(
            (k for s in self.stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0
        )
        released, self.pending = _split(self.pending, len(text) - hold)
        return released, False

    def flush(self) -> list[Segment]:
        tail = self.detokenizer.flush()
        released = self.pending + ([(tail, False)] if tail else [])
        self.pending = []
        return released


def _split(segments: list[Segment], at: int) -> tuple[list[Segment], list[Segment]]:
    """Split segments at character offset `at`."""
    head: list[Segment] = []
    for i, (text, drafted) in enumerate(segments):
        if at <= 0:
            return head, segments[i:]
        if len(text) > at:
            return head + [(text[:at], drafted)], [(text[at:], drafted)] + segments[i + 1 :]
        head.append((text, drafted))
        at -= len(text)
    return head, []
