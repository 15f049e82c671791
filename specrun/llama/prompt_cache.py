"""Prompts kept in host memory across requests and slots, as llama-server's `--cache-ram`.

A slot that takes another conversation would drop what its sequence held; where that is
most of it, the sequence's state (its KV cells, `Model.sequence_state`) is saved here first,
with its tokens, for each model of the slot (the target and any draft model). A request whose
prompt shares a longer prefix with a saved prompt than any slot holds restores that state
into its slot (`Model.restore_sequence`) and evaluates only the rest. A saved state takes as
many bytes as its cells take in the KV cache (DESIGN.md, Prompt cache); the cache keeps at
most `limit_bytes` of them, the least recently used going first. Restoring changes no
answer: the sequence holds the cells its own decode of those tokens wrote.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from specrun.core.sequence import common_prefix_length
from specrun.llama.model import Model, SequenceCache

# A saved prompt is restored where the request keeps at least this share of it, and a slot's
# is saved where a request would drop more than this share of it: as llama-server, which
# restores none that the new prompt keeps less than a quarter of (copying a long state back
# for a short prefix costs more than it saves).
KEEP_SHARE = 0.25
DEFAULT_CACHE_MIB = 1024  # --cache-ram's default: a small machine's spare memory

# One model's sequence: the model, and the sequence of its KV cache a slot decodes in.
Holder = tuple[Model, SequenceCache]


@dataclass(frozen=True)
class SavedSequence:
    """One model's part of a saved prompt: the tokens its sequence held, and their state."""

    model: Model
    tokens: tuple[int, ...]
    state: bytearray


@dataclass(frozen=True, eq=False)
class Entry:
    """A saved prompt: the target's tokens, and each model's part (the target's first)."""

    tokens: tuple[int, ...]
    parts: tuple[SavedSequence, ...]

    @property
    def owner(self) -> Model:
        return self.parts[0].model

    @property
    def nbytes(self) -> int:
        return sum(len(part.state) for part in self.parts)


class PromptCache:
    """Saved prompts of any number of engines' models, `limit_bytes` at most, in the order
    they were last used. Safe to share between threads: a slot's state is read or written in
    the thread that decodes its model."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._entries: list[Entry] = []  # the least recently used first
        self._lock = threading.Lock()
        self.saved = self.restored = self.restored_tokens = 0  # since it was made

    @classmethod
    def of_mib(cls, mib: int) -> PromptCache | None:
        """--cache-ram's cache; None for 0 (no cache)."""
        return cls(mib << 20) if mib > 0 else None

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(entry.nbytes for entry in self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def take(self, holders: Sequence[Holder], prompt: Sequence[int], held: int) -> int:
        """Before a generation of `prompt` in the slot whose sequences are `holders` (the
        target's first): save what the slot holds where the prompt would drop most of it, then
        restore the saved prompt that holds more of `prompt` than `held` (what the KV cache
        holds of it already, in this slot or another it may take cells from) where there is
        one. How many of the prompt's tokens the slot holds from the cache (0: none)."""
        target = holders[0][1]
        kept = common_prefix_length(target.tokens, prompt)
        if kept < len(target.tokens) * (1 - KEEP_SHARE):
            self.save(holders)
        return self.restore(holders, prompt, max(held, kept))

    def save(self, holders: Sequence[Holder]) -> bool:
        """Save the slot's sequences, unless a saved prompt holds them already or they are
        more than the whole cache; saved prompts they hold whole go."""
        model, cache = holders[0]
        tokens = tuple(cache.tokens)
        if not tokens or self._holds(model, tokens):
            return False
        parts = tuple(
            SavedSequence(m, tuple(c.tokens), m.sequence_state(c)) for m, c in holders if c.tokens
        )
        entry = Entry(tokens, parts)
        if entry.nbytes > self.limit_bytes:
            return False
        with self._lock:
            self._entries = [
                e
                for e in self._entries
                if e.owner is not model or common_prefix_length(e.tokens, tokens) < len(e.tokens)
            ]
            while self._entries and self._size() + entry.nbytes > self.limit_bytes:
                self._entries.pop(0)
            self._entries.append(entry)
            self.saved += 1
        return True

    def restore(self, holders: Sequence[Holder], prompt: Sequence[int], held: int) -> int:
        """Restore the saved prompt that shares the longest prefix with `prompt`, more than
        `held` tokens and at least KEEP_SHARE of itself, into the slot's sequences; how many
        of the prompt's tokens that is (0: none restored). The entry stays saved."""
        model = holders[0][0]
        with self._lock:
            best, most = None, held
            for entry in self._entries:
                if entry.owner is not model:
                    continue
                shared = common_prefix_length(entry.tokens, prompt)
                if shared > most and shared >= KEEP_SHARE * len(entry.tokens):
                    best, most = entry, shared
            if best is None:
                return 0
            self._entries.remove(best)
            self._entries.append(best)  # the most recently used
        for part in best.parts:  # a part that cannot be restored leaves its sequence empty
            cache = next((c for m, c in holders if m is part.model), None)
            restored = cache is not None and part.model.restore_sequence(
                cache, part.tokens, part.state
            )
            if part.model is model and not restored:
                return 0
        self.restored += 1
        self.restored_tokens += most
        return most

    def forget(self, model: Model) -> None:
        """Drop the saved prompts of a model that closes."""
        with self._lock:
            self._entries = [entry for entry in self._entries if entry.owner is not model]

    def _holds(self, model: Model, tokens: Sequence[int]) -> bool:
        """Whether a saved prompt of the model begins with `tokens` (it is marked used)."""
        with self._lock:
            for entry in self._entries:
                if entry.owner is model and common_prefix_length(entry.tokens, tokens) == len(
                    tokens
                ):
                    self._entries.remove(entry)
                    self._entries.append(entry)
                    return True
        return False

    def _size(self) -> int:
        return sum(entry.nbytes for entry in self._entries)
