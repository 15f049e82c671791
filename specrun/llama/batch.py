"""One decode of a llama.cpp context: runs of positions, of one sequence or several, filled
into the native batch, and what the decode gives back for each run.

A `Batch` owns a context's `llama_batch` and numpy views of its arrays (a run is filled by
array copies), and views of llama.cpp's output buffers. `decode(runs)` decodes every run's
positions in one pass; then `logits(i)`, `candidates(i, width)` and `hidden(i)` are run i's
rows of logits, of the device's candidates and of kept hidden states: views of llama.cpp's
buffers, valid until the next decode. `Model` (the KV cache as a cache of token sequences)
and `Capture` (what a head is trained on) both decode through it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import llama_cpp as llama
import numpy as np

from specrun.errors import SpecrunError
from specrun.llama import ext


class Run(NamedTuple):
    """Positions start, start + 1, ... of sequence `seq_id`, holding `tokens` and then
    `padding` copies of the last (positions decoded only to widen the pass); llama.cpp
    computes logits from `tokens[logits_from]` on, padding included (`len(tokens) +
    padding`: none)."""

    seq_id: int
    tokens: Sequence[int]
    start: int
    logits_from: int
    padding: int = 0


class Positions(Protocol):
    """What the batch reads of a run (`Run`, or a caller's record that carries more)."""

    @property
    def seq_id(self) -> int: ...
    @property
    def tokens(self) -> Sequence[int]: ...
    @property
    def start(self) -> int: ...
    @property
    def logits_from(self) -> int: ...
    @property
    def padding(self) -> int: ...


class DecodeFailed(SpecrunError):
    """llama_decode returned an error status."""


LAST_STATE = -1  # a hidden-state source: the last layer's output (what MTP layers read)


def hidden_sources(layers: Sequence[int]) -> tuple[int, ...]:
    """What a draft reads of each position's hidden state, in its order: the inputs of
    `layers` (repeats and all: EAGLE-3 may read one layer twice), or the last state."""
    return tuple(layers) or (LAST_STATE,)


class Batch:
    """The native batch of `context` (`n_batch` positions at most), its output buffers read
    as rows of `n_vocab` logits and, once `keep_hidden` asked, of `n_embd` hidden states."""

    def __init__(
        self,
        context: llama.llama_context_p,
        n_batch: int,
        n_vocab: int,
        n_embd: int,
        name: str,
        sequences_per_position: int = 1,
    ) -> None:
        """`sequences_per_position`: the most sequences a position may be in at once (a tree's
        nodes are in those of every branch through them)."""
        self.context = context
        self.n_batch = n_batch
        self.n_vocab = n_vocab
        self.n_embd = n_embd
        self.name = name
        native = self.native = llama.llama_batch_init(n_batch, 0, sequences_per_position)
        self._tokens = np.ctypeslib.as_array(native.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(native.pos, shape=(n_batch,))
        self._flags = np.ctypeslib.as_array(native.logits, shape=(n_batch,))
        # Every position is in one sequence, 0 until a run says otherwise; `_seq` mirrors the
        # ids the native array holds (llama.cpp never writes to a batch). A tree's decode puts
        # positions in several for its pass only.
        self._n_seq_id = np.ctypeslib.as_array(native.n_seq_id, shape=(n_batch,))
        self._n_seq_id[:] = 1
        self._seq = np.zeros(n_batch, np.int32)
        self._seq_of_all = 0  # the sequence every position is in, -1 where they differ
        for j in range(n_batch):
            native.seq_id[j][0] = 0
        self.positions = np.arange(0, dtype=np.int32)  # grown as runs reach further
        # Of the last decode: where each run's positions and rows begin, and the rows in all.
        self._at: list[int] = []
        self._rows_at: list[int] = []
        self.n_tokens = self.n_outputs = self.runs_with_rows = 0
        # What is kept of every position's hidden state: the inputs of these layers, and
        # LAST_STATE the last hidden state (MTP), for each draft that reads them.
        self.hidden_sources: list[int] = []
        # Views of llama.cpp's output buffers, by what they view (`_view`).
        self._views: dict[tuple[int, int, type], np.ndarray] = {}

    def keep_hidden(self, layers: Sequence[int] = ()) -> None:
        """From the next decode on, keep every position's hidden state also as a draft reads
        it: the inputs of `layers`, or with none given, the last hidden state. llama.cpp then
        computes every position of a pass through the last layer, not only those with logits."""
        for source in hidden_sources(layers):
            if source in self.hidden_sources:
                continue
            self.hidden_sources.append(source)
            if source == LAST_STATE:
                ext.function("llama_set_embeddings_nextn")(self.context, True, False)
            else:
                ext.function("llama_set_embeddings_layer_inp")(self.context, source, True)

    def fill(self, runs: Sequence[Positions]) -> None:
        """Put the runs' positions in the batch, one after another."""
        j = rows = with_rows = 0
        rewritten = False  # whether any position changed sequence
        self._at.clear()
        self._rows_at.clear()
        for run in runs:
            n = len(run.tokens)
            width = n + run.padding
            end = run.start + width
            if end > len(self.positions):
                self.positions = np.arange(max(end, 2 * len(self.positions)), dtype=np.int32)
            if width == 1:  # a draft's step: item writes cost a fifth of slice copies
                token = run.tokens[0]
                if not 0 <= token < self.n_vocab:
                    raise self._not_a_token(token)
                self._tokens[j] = token
                self._pos[j] = run.start
                self._flags[j] = run.logits_from == 0
            else:
                try:
                    self._tokens[j : j + n] = run.tokens
                except OverflowError:  # an id past int32's range
                    raise self._not_a_token(max(run.tokens, key=abs)) from None
                written = self._tokens[j : j + n]
                if n and not 0 <= written.min() <= written.max() < self.n_vocab:
                    raise self._not_a_token(
                        int(written[(written < 0) | (written >= self.n_vocab)][0])
                    )
                if run.padding:
                    self._tokens[j + n : j + width] = run.tokens[-1]
                self._pos[j : j + width] = self.positions[run.start : end]
                self._flags[j : j + run.logits_from] = 0
                self._flags[j + run.logits_from : j + width] = 1
            if run.seq_id != self._seq_of_all:  # a batch of one sequence, the usual one, skips
                rewritten |= self._in_sequence(run.seq_id, j, j + width)
            self._at.append(j)
            self._rows_at.append(rows)
            j += width
            rows += width - run.logits_from
            with_rows += width > run.logits_from
        self.native.n_tokens = self.n_tokens = j
        self.n_outputs, self.runs_with_rows = rows, with_rows
        if rewritten:
            self._seq_of_all = int(self._seq[0]) if np.all(self._seq == self._seq[0]) else -1

    def _not_a_token(self, token: int) -> SpecrunError:
        """llama.cpp aborts the process on a token id outside the vocabulary (the last
        defence: sampling draws none): refused here, before the decode."""
        return SpecrunError(
            f"{self.name}: token {token} is not in the vocabulary (0-{self.n_vocab - 1})"
        )

    def _in_sequence(self, seq_id: int, start: int, end: int) -> bool:
        """Put the batch's positions start..end in sequence `seq_id` where they are not;
        whether any was not."""
        held = self._seq[start:end]
        moved = np.flatnonzero(held != seq_id)
        for k in moved:
            self.native.seq_id[start + int(k)][0] = seq_id
        held[:] = seq_id
        return bool(len(moved))

    def decode(self, runs: Sequence[Positions]) -> None:
        """Decode the runs in one pass; DecodeFailed where llama.cpp refuses."""
        self.fill(runs)
        status = self._decode()
        if status != 0:
            raise DecodeFailed(f"{self.name}: llama_decode failed (status {status})")

    def decode_tree(
        self, tokens: Sequence[int], positions: Sequence[int], sequences: Sequence[Sequence[int]]
    ) -> None:
        """Decode one pass of positions each in its own set of sequences, every one with rows
        (a token tree: each node in the sequences of the branches through it). DecodeFailed
        where llama.cpp refuses. The batch's positions are in one sequence again after it."""
        n = len(tokens)
        written = np.asarray(tokens, dtype=np.int64)
        if n and not 0 <= written.min() <= written.max() < self.n_vocab:
            raise self._not_a_token(int(written[(written < 0) | (written >= self.n_vocab)][0]))
        self._tokens[:n] = written
        self._pos[:n] = positions
        self._flags[:n] = 1
        for j, ids in enumerate(sequences):
            self._n_seq_id[j] = len(ids)
            for k, seq_id in enumerate(ids):
                self.native.seq_id[j][k] = seq_id
        self._at[:], self._rows_at[:] = [0], [0]
        self.native.n_tokens = self.n_tokens = self.n_outputs = n
        self.runs_with_rows = 1
        try:
            status = self._decode()
        finally:
            self._n_seq_id[:n] = 1
            for j in range(n):
                self.native.seq_id[j][0] = int(self._seq[j])
        if status != 0:
            raise DecodeFailed(f"{self.name}: llama_decode failed (status {status})")

    def logits(self, run: int) -> np.ndarray:
        """Run `run`'s rows of logits [outputs, n_vocab], a view of llama.cpp's buffer."""
        first = self._rows_at[run]
        return self._outputs(self.n_outputs)[first : first + self.outputs_of(run)]

    def all_logits(self) -> np.ndarray:
        """Every row of the decode [n_outputs, n_vocab], in batch order (a view)."""
        return self._outputs(self.n_outputs)

    def candidates(self, run: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Run `run`'s rows as the device's `width` best candidates (ids, logits): views."""
        first, count = self._rows_at[run], self.outputs_of(run)
        return self._candidates(count, width, after=self.n_outputs - first - count)

    def hidden(self, run: int) -> dict[int, np.ndarray]:
        """Run `run`'s hidden rows [positions, n_embd] of each kept source (views)."""
        first = self._at[run]
        end = self._at[run + 1] if run + 1 < len(self._at) else self.n_tokens
        return {source: rows[first:end] for source, rows in self.all_hidden().items()}

    def all_hidden(self) -> dict[int, np.ndarray]:
        """Every position's hidden rows of each kept source, in batch order (views)."""
        return self._hidden(self.n_tokens)

    def outputs_of(self, run: int) -> int:
        """How many rows run `run` has in the last decode."""
        end = self._rows_at[run + 1] if run + 1 < len(self._rows_at) else self.n_outputs
        return end - self._rows_at[run]

    # --- the native calls, a thin layer a model without weights can replace -------
    # llama_cpp's bindings return Any (its ctypes_function decorator is untyped): a result
    # returned on is declared as what ctypes makes of the C type.

    def _decode(self) -> int:
        status: int = llama.llama_decode(self.context, self.native)
        return status

    def _outputs(self, count: int) -> np.ndarray:
        """The last decode's logits [count, n_vocab], in batch order: a view of llama.cpp's
        buffer."""
        return self._view(llama.llama_get_logits(self.context), self.n_vocab)[:count]

    def _candidates(self, count: int, width: int, after: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The last decode's candidates [count, width] (ids, logits) of the `count` rows before
        its last `after`, in batch order: views of llama.cpp's buffers, whose rows lie a
        vocabulary apart."""
        first = -(count + after)
        found = llama.llama_get_sampled_candidates_count_ith(self.context, first)
        if found != width:
            raise SpecrunError(f"{self.name}: the backend chose {found} candidates, not {width}")
        ids = llama.llama_get_sampled_candidates_ith(self.context, first)
        values = llama.llama_get_sampled_logits_ith(self.context, first)
        rows = slice(count), slice(width)
        return self._view(ids, self.n_vocab)[rows], self._view(values, self.n_vocab)[rows]

    def _hidden(self, count: int) -> dict[int, np.ndarray]:
        """The last decode's hidden rows [count, n_embd] of each kept source, in batch order."""
        layer_input = ext.function("llama_get_embeddings_layer_inp")
        pointers = {
            source: ext.function("llama_get_embeddings_nextn")(self.context)
            if source == LAST_STATE
            else layer_input(self.context, source)
            for source in self.hidden_sources
        }
        return {source: self._view(p, self.n_embd)[:count] for source, p in pointers.items()}

    def _view(self, pointer: ctypes._Pointer[Any], columns: int) -> np.ndarray:
        """A [n_batch, columns] view of one of llama.cpp's output buffers from `pointer` on.

        Made once for each address, width and type the buffer has (it moves only when
        llama.cpp reallocates it): numpy's as_array, right after a decode with the CPU's
        caches cold, costs a measurable share of a small model's round.
        """
        key = (ctypes.addressof(pointer.contents), columns, pointer._type_)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = np.ctypeslib.as_array(pointer, (self.n_batch, columns))
        return view

    def close(self) -> None:
        native, self.native = self.native, None
        if native is not None:
            llama.llama_batch_free(native)
