"""A parallel engine's slots and the one gate to them.

A slot is one of the generations an engine runs at once (`LoadOptions.parallel`): its
sequence of the target (a `SequenceView`), its draft source and its γ policy. `Slots` hands
a generation the free slot whose cache holds the longest prefix of its prompt (the next turn
of a conversation finds its own), else the one free longest, waiting while none is free; the
generation is a member of the gather, whose batches wait for its model calls, for as long as
it holds the slot.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from specrun.core.drafting import DraftSource
from specrun.core.gamma import GammaPolicy
from specrun.core.sequence import common_prefix_length
from specrun.llama.slots import Gather, Member, SequenceView


@dataclass
class Slot:
    """One of a parallel engine's generations at once: its sequence of each model (views),
    its draft source and its γ policy, which learns from its own rounds."""

    index: int
    target: SequenceView
    draft: DraftSource | None
    policy: GammaPolicy


class Slots:
    """The slots, in order, and the gate a generation takes one through (`held`)."""

    def __init__(self, slots: Sequence[Slot], gather: Gather) -> None:
        self._slots = tuple(slots)
        self.gather = gather  # where the slots' model calls are decoded together
        self._free = list(slots)  # the least recently freed first
        self._freed = threading.Condition()

    def __len__(self) -> int:
        return len(self._slots)

    def __iter__(self) -> Iterator[Slot]:
        return iter(self._slots)

    @property
    def free(self) -> tuple[Slot, ...]:
        with self._freed:
            return tuple(self._free)

    @contextmanager
    def held(self, prompt: Sequence[int]) -> Iterator[tuple[Slot, Member]]:
        """A slot for a generation of `prompt` (waiting for one), a member of the gather while
        it is held, free again the moment it is let go."""
        slot = self._take(prompt)
        try:
            with self.gather.member() as member:
                yield slot, member
        finally:
            with self._freed:
                self._free.append(slot)
                self._freed.notify()

    def _take(self, prompt: Sequence[int]) -> Slot:
        with self._freed:
            while not self._free:
                self._freed.wait()
            slot = max(self._free, key=lambda s: common_prefix_length(s.target.tokens, prompt))
            self._free.remove(slot)
            return slot

    def close(self) -> None:
        """End the gather's decoding thread (once no generation holds a slot)."""
        self.gather.close()
