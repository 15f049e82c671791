"""One loaded GGUF model over llama-cpp-python's low-level API: tokens in, logits out.

The KV cache is treated as a cache of a token sequence (DESIGN.md): `logits(seq, k)`
makes the cache hold `seq` and returns the logits of its last k positions, reusing
the longest common prefix with what it held and dropping the rest. Rolling back a
rejected draft is just the next call with a shorter sequence. The
process-wide parts of llama.cpp (its log, the backend) are `native`'s, the load
parameters `params`'s.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple, overload

import llama_cpp as llama
import numpy as np

from specrun.core.gamma import GAMMA_LIMIT
from specrun.core.heads import HiddenRows
from specrun.core.model import BackendSampling
from specrun.core.sampling import CandidateRows, Rows
from specrun.core.sequence import Continuation, Tokens, common_prefix_length
from specrun.errors import SpecrunError
from specrun.llama import ext
from specrun.llama.devices import amx_allowed, build_info, gpu_offload_supported
from specrun.llama.diagnose import load_failure
from specrun.llama.gguf import check_gguf_header, tensor_table
from specrun.llama.invariance import CHUNK_WIDTHS, PROBE_POSITIONS, Invariance
from specrun.llama.native import clear_log, set_verbose
from specrun.llama.params import load_params
from specrun.llama.vocab import Vocabulary
from specrun.system.cpus import physical_cores
from specrun.system.interrupts import raise_pending

DEFAULT_CTX = 4096  # tokens; less where the model was trained for less
HIDDEN_ROWS_BYTES = 256 << 20  # at most this much of a head's pending hidden rows is kept


@dataclass(eq=False)
class SequenceCache:
    """What one sequence of the KV cache holds, position by position (`tokens`)."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    # Positions the cache may hold: len(tokens), or more after a decode that failed or was
    # interrupted before `tokens` took it in.
    held: int = 0
    # The cache's first `seen` tokens are `base`'s, as far as it still holds that many.
    base: Tokens | None = None
    seen: int = 0
    n_evaluated: int = 0  # tokens decoded for it so far


@dataclass(eq=False)
class Call:
    """One sequence's `logits` call, decoded in one batch with other sequences' calls
    (`Model.decode_calls`): what it asks, then what it got."""

    cache: SequenceCache
    seq: Sequence[int]
    last: int
    view: bool = False
    top: int | None = None
    rows: Rows | None = None
    first_of_shape: bool = False  # whether its rows came from a decode of a new shape
    shared_rows: int = 0  # other sequences' rows in that decode
    shared_with: int = 0  # how many sequences they were for


class Run(NamedTuple):
    """Positions start..end of a call's sequence in a decode of `decode_calls`: with `rows`,
    its rows (`width` candidates each where the device chooses them)."""

    call: Call
    start: int
    end: int
    rows: bool
    width: int | None


class Model(Vocabulary):
    """A GGUF model with one context, its KV cache holding `self.tokens`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_ctx: int | None = DEFAULT_CTX,
        gpu_layers: int | None = None,
        threads: int | None = None,
        n_batch: int = 512,
        verbose: bool = False,
        split: Sequence[float] | None = None,
        main_gpu: int | None = None,
        devices: Sequence[int] | None = None,
        reproducible: bool = False,
        load_mtp: bool = False,
        backend_sampling: BackendSampling = "auto",
        sequences: int = 1,
    ) -> None:
        """`sequences` > 1: as many sequences share the context, each with `n_ctx` positions of
        one KV pool (decoded together by `decode_calls`; not with `reproducible` or a head)."""
        self.path = Path(path)
        self.name = self.path.name
        check_gguf_header(self.path)
        set_verbose(verbose)
        self.devices = tuple(
            devices or ()
        )  # given: where its offloaded layers go, RPC servers included
        self.can_offload = bool(self.devices) or gpu_offload_supported()
        if gpu_layers is None:  # all layers where llama.cpp can offload, else none
            gpu_layers = 999 if self.can_offload else 0
        self.gpu_layers = gpu_layers

        clear_log()
        model_params = load_params(
            gpu_layers,
            build_info(),
            allow_amx=amx_allowed(),
            tensors=lambda: tensor_table(self.path),
            split=split,
            main_gpu=main_gpu,
            devices=devices,
            reproducible=reproducible,
        )
        model_params.load_mtp = load_mtp  # the layers an MTP head drafts with, else skipped
        self._model = llama.llama_model_load_from_file(os.fsencode(self.path), model_params)
        if not self._model:
            raise_pending()
            raise load_failure(f"cannot load {self.path}")
        self._bind_vocabulary(llama.llama_model_get_vocab(self._model))
        self.n_ctx_train = llama.llama_model_n_ctx_train(self._model)
        self.n_layer = llama.llama_model_n_layer(self._model)
        self.n_embd = llama.llama_model_n_embd(self._model)
        self.n_layer_nextn = llama.llama_model_n_layer_nextn(self._model)
        self.architecture = model_architecture(self._model)
        if self.architecture == "eagle3":  # its graph needs the target's hidden states
            self.close()
            raise SpecrunError(
                f"{self.name} is an EAGLE-3 head: it drafts for the target it was made for "
                f"(as an eagle3:{self.name} draft) and cannot run as a model"
            )

        threads = threads or physical_cores()
        ctx_params = llama.llama_context_default_params()
        ctx_params.n_ctx = min(n_ctx or self.n_ctx_train, self.n_ctx_train) * sequences
        ctx_params.n_batch = ctx_params.n_ubatch = n_batch
        ctx_params.n_seq_max = sequences
        # One pool of cells for every sequence: a batch of several decodes as one ubatch (split
        # streams would cut it into equal parts per sequence).
        ctx_params.kv_unified = sequences > 1
        ctx_params.n_outputs_max_per_seq = GAMMA_LIMIT + 1  # a verify's rows, when sampled
        ctx_params.n_threads = ctx_params.n_threads_batch = threads
        ctx_params.swa_full = True  # a sliding-window cache could not drop a rejected suffix
        ctx_params.no_perf = True
        self._ctx = llama.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            self.close()
            raise load_failure(f"cannot create a context for {self.path}")
        self.n_ctx = llama.llama_n_ctx(self._ctx) // sequences  # each sequence's share
        self.n_batch = llama.llama_n_batch(self._ctx)  # llama.cpp caps it at the context size
        self.threads = threads
        self._memory = llama.llama_get_memory(self._ctx)
        self._init_cache(n_batch, sequences)
        self.invariance = self.probe_invariance() if reproducible else None
        # The output layer is on the last offloaded device whenever any layer is. llama.cpp's
        # backend samplers crash a Vulkan device (DESIGN.md, Vulkan), and an RPC
        # server's backend cannot be told from here: `auto` asks for them on neither.
        offloaded = self.can_offload and gpu_layers > 0
        on_vulkan = offloaded and not self.devices and "Vulkan" in build_info().gpu_backends
        if backend_sampling == "on" and on_vulkan:
            self.close()
            raise SpecrunError(
                f"{self.path.name}: llama.cpp's backend samplers crash on Vulkan devices "
                "(DESIGN.md, Vulkan); use `backend_sampling` off or auto"
            )
        wanted = backend_sampling == "on" or (
            backend_sampling == "auto" and offloaded and not on_vulkan and not self.devices
        )
        self.samples_on_device = wanted and self._probe_backend_sampling()
        if backend_sampling == "on" and not self.samples_on_device:
            self.close()
            raise SpecrunError(
                f"{self.path.name}: this build's backend cannot choose candidates on its "
                "device; use `backend_sampling` off"
            )

    def _init_cache(self, n_batch: int, sequences: int = 1) -> None:
        """The Python side of the cache: the batch it is fed by and the sequences it holds."""
        batch = self._batch = llama.llama_batch_init(n_batch, 0, 1)
        # Numpy views on the batch's arrays: a chunk is filled by array copies.
        self._batch_tokens = np.ctypeslib.as_array(batch.token, shape=(n_batch,))
        self._batch_pos = np.ctypeslib.as_array(batch.pos, shape=(n_batch,))
        self._batch_logits = np.ctypeslib.as_array(batch.logits, shape=(n_batch,))
        self._positions = np.arange(self.n_ctx + n_batch, dtype=np.int32)  # padding may pass n_ctx
        # Every position is in one sequence, 0 unless `decode_calls` says otherwise: llama.cpp
        # never writes to a batch.
        np.ctypeslib.as_array(batch.n_seq_id, shape=(n_batch,))[:] = 1
        self._batch_seq = np.zeros(n_batch, np.int32)  # what `seq_id` holds, position by position
        for j in range(n_batch):
            batch.seq_id[j][0] = 0
        self.piece = lru_cache(maxsize=None)(self._piece)
        self.is_eog = lru_cache(maxsize=None)(self._is_eog)  # asked of every committed token
        self.caches = [SequenceCache(seq_id) for seq_id in range(sequences)]
        self._seq = self.caches[0]  # the one `logits` keeps
        self.n_evaluated = 0  # tokens decoded so far: how much work the cache saved
        # The first decode of a batch shape (positions, positions with logits) sets up its
        # graph and buffers and costs up to twice a later one: not a sample of its cost.
        self._shapes_decoded: set[tuple[int, int]] = set()
        self.first_of_shape = False  # whether the last `logits` call decoded a new shape
        self.shared_rows = self.shared_with = 0  # `logits` decodes this sequence alone
        self.min_width = 1  # no decode spans fewer positions ("padded")
        self.max_width: int | None = (
            None  # positions with logits decoded at most this many per pass
        )
        self.samples_on_device = False  # whether `logits(top=...)` returns candidates
        # Attached backend samplers, by sequence: (width, chain).
        self._samplers: dict[int, tuple[int, llama.llama_sampler_p]] = {}
        self.hidden_rows: HiddenRows | None = None  # kept for a head (`keep_hidden`)
        self._hidden_layers: tuple[int, ...] = ()  # whose inputs they are; () the last state
        # Views of llama.cpp's output buffers (logits, candidates, hidden rows), by what they
        # view: `_view`.
        self._views: dict[tuple[int, int, type], np.ndarray] = {}

    @property
    def tokens(self) -> list[int]:
        """What the KV cache holds for `logits`' sequence, position by position."""
        return self._seq.tokens

    @property
    def model(self) -> llama.llama_model_p:
        """The native `llama_model *` (an MTP head makes its context on it)."""
        model: llama.llama_model_p = self._model
        return model

    @property
    def context(self) -> llama.llama_context_p:
        """The native `llama_context *` (an EAGLE-3 head borrows its embeddings through it)."""
        context: llama.llama_context_p = self._ctx
        return context

    @property
    def offloaded_layers(self) -> int:
        """Repeating layers on the GPU: what llama.cpp does with n_gpu_layers."""
        return min(self.gpu_layers, self.n_layer) if self.can_offload else 0

    # --- the one operation the loop needs -------------------------------------------

    @overload
    def logits(
        self, seq: Sequence[int], last: int = 1, *, view: bool = False, top: None = None
    ) -> np.ndarray: ...

    @overload
    def logits(
        self, seq: Sequence[int], last: int = 1, *, view: bool = False, top: int
    ) -> Rows: ...

    def logits(
        self, seq: Sequence[int], last: int = 1, *, view: bool = False, top: int | None = None
    ) -> Rows:
        """Make the cache hold `seq`; return float32 logits [last, n_vocab] of its last positions.

        `last=0` only fills the cache (prompt prefill). `view=True` may return llama.cpp's
        own output buffer, valid only until the next call on this model, for a caller that
        reads the rows at once, as the round loop does: it saves copying 0.6 MB a row at a
        152k vocabulary. Not marked read-only: numpy's argmax copies such an array first.
        With `top`, where the model samples on its device (`samples_on_device`), each row's
        `top` best candidates instead (CandidateRows, copies): only they leave the device.
        """
        self._check(seq, last)
        width = self._width(top)
        if last:  # a pass without rows leaves the sampler as the last one with rows asked for
            self._set_sampler(width)
        cache = self._seq
        keep = self._reuse(cache, seq, last)

        first_out = len(seq) - last
        spans = self._spans(keep, len(seq), first_out)
        # The buffer can be handed out where one decode, the last, makes every row asked for.
        out = (
            None
            if width is not None or (view and last and spans[-1][0] <= first_out)
            else np.empty((last, self.n_vocab), np.float32)
        )
        candidates = (
            CandidateRows(np.empty((last, width), np.int32), np.empty((last, width), np.float32))
            if width is not None
            else None
        )
        self.first_of_shape = False
        for start, end in spans:
            chunk = seq[start:end]
            padding, flagged, wanted = self._fill_batch(chunk, start, first_out)
            self.first_of_shape |= self._first_decode_of(
                len(chunk) + padding, len(chunk) + padding - flagged
            )
            cache.held = end + padding  # what the decode may write, until `tokens` says
            self._decode_or_forget([(cache, start)])
            if self.hidden_rows is not None:
                self.hidden_rows.write(start, *self._hidden_outputs(len(chunk)))
            cache.tokens.extend(chunk)
            if not padding or self._drop(cache, end):  # padding a cache could not drop stays held
                cache.held = end
            self._count(cache, len(chunk))
            if end > first_out:
                # Rows before `wanted` had logits only to keep the output layer `min_width` wide.
                outputs, skip = len(chunk) + padding - flagged, wanted - flagged
                into = slice(max(start, first_out) - first_out, end - first_out)
                count = into.stop - into.start
                if candidates is not None and width is not None:
                    ids, values = self._candidates(outputs, width)
                    candidates.ids[into] = ids[skip : skip + count]
                    candidates.logits[into] = values[skip : skip + count]
                    continue
                rows = self._outputs(outputs)[skip : skip + count]
                if out is None:
                    return rows
                out[into] = rows
        if candidates is not None:
            return candidates
        assert out is not None, "the last decode returned its rows as a view"
        return out

    def _check(self, seq: Sequence[int], last: int) -> None:
        if len(seq) > self.n_ctx:
            raise SpecrunError(
                f"{self.name}: sequence of {len(seq)} tokens exceeds the context ({self.n_ctx})"
            )
        if not 0 <= last <= len(seq):
            raise ValueError(f"cannot return the last {last} of {len(seq)} positions")

    def _width(self, top: int | None) -> int | None:
        """The candidates a row leaves the device as, for `top`; None: the whole row."""
        return top if self.samples_on_device and top is not None and top < self.n_vocab else None

    def _reuse(self, cache: SequenceCache, seq: Sequence[int], last: int) -> int:
        """Keep the longest prefix of `seq` the cache holds, short of its last `last`
        positions (and of `min_width`), dropping the rest; how many positions that is."""
        # Of an append-only sequence seen before, only what follows the part held then can differ.
        base, n_base = (seq.base, seq.n) if isinstance(seq, Continuation) else (None, 0)
        held = len(cache.tokens)
        start = min(cache.seen, held) if base is not None and base is cache.base else 0
        keep = start + common_prefix_length(cache.tokens[start:], seq[start:held])
        cache.base, cache.seen = base, n_base  # true from here on: the cache holds a prefix of seq
        keep = min(keep, len(seq) - last)
        if keep < len(seq):  # a decode narrower than `min_width` starts earlier
            keep = min(keep, max(len(seq) - self.min_width, 0))
        if keep < cache.held:  # else there is nothing to drop: no native call
            self._truncate(cache, keep)
        return len(cache.tokens)

    def _decode_or_forget(self, starts: Sequence[tuple[SequenceCache, int]]) -> None:
        """Decode the batch; where it fails, forget what each sequence's part of it may have
        left in the cache (from its start on) and say why."""
        status = self._decode()
        if status != 0:
            for cache, start in starts:
                self._truncate(cache, start)
            raise_pending()  # a decode stopped by Ctrl-C is the signal's doing, not an error
            raise SpecrunError(f"{self.name}: llama_decode failed (status {status})")

    def _count(self, cache: SequenceCache, decoded: int) -> None:
        cache.n_evaluated += decoded
        self.n_evaluated += decoded
        raise_pending()

    def decode_calls(self, calls: Sequence[Call]) -> None:
        """Serve several sequences' `logits` calls together: every call's new positions in one
        batch where they fit in `n_batch`, else in as few as they fit in, the rows asked for in
        the last (`Call.rows`: views of llama.cpp's buffer, valid until this model's next decode,
        where the call asks for a view and its rows all come from the last; else copies)."""
        if self.min_width > 1 or self.max_width or self.hidden_rows is not None:
            raise SpecrunError(f"{self.name}: only plain decoding serves several sequences at once")
        prefills: list[Run] = []
        outputs: list[Run] = []
        # llama.cpp runs a sampler of a sequence without rows in the batch on its first row,
        # and that run can overwrite the candidates of the sequence whose row it is: only the
        # sequences with rows keep theirs.
        with_rows = {call.cache.seq_id for call in calls if call.last}
        for seq_id in [s for s in self._samplers if s not in with_rows]:
            self._set_sampler(None, seq_id)
        for call in calls:
            self._check(call.seq, call.last)
            width = self._width(call.top)
            if call.last:
                self._set_sampler(width, call.cache.seq_id)
            keep = self._reuse(call.cache, call.seq, call.last)
            first_out = len(call.seq) - call.last
            if keep < first_out:  # a prompt (or a draft catching up): another may hold it
                keep = self._borrow(call.cache, call.seq, keep, first_out)
            if keep < first_out:
                prefills.append(Run(call, keep, first_out, False, None))
            if call.last:
                outputs.append(Run(call, first_out, len(call.seq), True, width))
            call.rows = None
        # Positions without rows first: every call's rows then come from the last decode.
        decodes = _cut(prefills + outputs, self.n_batch)
        for number, runs in enumerate(decodes, 1):
            self._decode_runs(runs, last=number == len(decodes))

    def _borrow(self, cache: SequenceCache, seq: Sequence[int], keep: int, limit: int) -> int:
        """Where another sequence holds more of `seq`'s first `limit` positions than the
        `keep` that `cache` holds, take its cells for them (one KV pool: the cells are shared,
        not copied): a system prompt or a conversation that another slot evaluated. How many
        positions the cache holds now."""
        donor, most = None, keep
        for other in self.caches:
            if other is not cache and (held := common_prefix_length(other.tokens, seq)) > most:
                donor, most = other, min(held, limit)
        if donor is None:  # else most > keep: held by the donor and short of `limit`
            return keep
        llama.llama_memory_seq_cp(self._memory, donor.seq_id, cache.seq_id, keep, most)
        cache.tokens.extend(seq[keep:most])
        cache.held = most
        return most

    def _decode_runs(self, runs: list[Run], *, last: bool) -> None:
        """One decode of `decode_calls`: each run's positions, then its rows to its call."""
        j = 0
        for run in runs:
            call, width = run.call, run.end - run.start
            self._batch_tokens[j : j + width] = call.seq[run.start : run.end]
            self._batch_pos[j : j + width] = self._positions[run.start : run.end]
            self._batch_logits[j : j + width] = run.rows
            self._in_sequence(call.cache.seq_id, j, j + width)
            call.cache.held = max(call.cache.held, run.end)
            j += width
        self._batch.n_tokens = j
        n_out = sum(run.end - run.start for run in runs if run.rows)
        sequences = sum(run.rows for run in runs)  # with rows
        self.first_of_shape = self._first_decode_of(j, n_out)
        self._decode_or_forget([(run.call.cache, len(run.call.cache.tokens)) for run in runs])
        out_at = 0
        for run in runs:
            call, count = run.call, run.end - run.start
            call.cache.tokens.extend(call.seq[run.start : run.end])
            call.cache.held = len(call.cache.tokens)
            self._count(call.cache, count)
            if not run.rows:
                continue
            call.first_of_shape = self.first_of_shape
            call.shared_rows, call.shared_with = n_out - count, sequences - 1
            begins = run.start == len(call.seq) - call.last  # its first row is in this decode
            if run.width is not None:
                ids, values = self._candidates(count, run.width, after=n_out - out_at - count)
                rows: Rows = CandidateRows(ids.copy(), values.copy())
            else:
                view = self._outputs(n_out)[out_at : out_at + count]
                # A view where every row is in this decode, the last: none comes after it.
                rows = view if last and call.view and begins else view.copy()
            out_at += count
            call.rows = rows if begins else _joined(call.rows, rows)

    def _first_decode_of(self, positions: int, outputs: int) -> bool:
        """Whether the decode about to run is the first of its shape (`first_of_shape`)."""
        shape = (positions, outputs)
        first = shape not in self._shapes_decoded
        self._shapes_decoded.add(shape)
        return first

    def _in_sequence(self, seq_id: int, start: int, end: int) -> None:
        """Put the batch's positions start..end in sequence `seq_id` (where they are not)."""
        held = self._batch_seq[start:end]
        for k in np.flatnonzero(held != seq_id):
            self._batch.seq_id[start + int(k)][0] = seq_id
        held[:] = seq_id

    def _spans(self, keep: int, end: int, first_out: int) -> list[tuple[int, int]]:
        """The decodes that take the cache from `keep` to `end` positions: `n_batch` wide at
        most, those with logits `max_width`, and none narrower than `min_width` where the
        sequence is that long."""
        if not self.max_width and 0 < end - keep <= self.n_batch:  # a round's: one decode
            return [(keep, end)]
        outputs_from = max(first_out, keep) if self.max_width else end
        bounds = [
            *range(keep, outputs_from, self.n_batch),
            *range(outputs_from, end, self.max_width or 1),
        ]
        if len(bounds) > 1 and end - bounds[-1] < self.min_width:
            bounds[-1] = end - self.min_width  # the last decode takes positions from the one before
        return list(zip(bounds, [*bounds[1:], end]))

    def _fill_batch(self, chunk: Sequence[int], start: int, first_out: int) -> tuple[int, int, int]:
        """Positions start.. of the sequence, with logits from `first_out` on.

        llama.cpp runs the last layer's feed-forward and the output layer only on the
        positions with logits, so under `min_width` at least that many get them. A chunk
        narrower than `min_width` (a sequence that short) gets copies of its last token
        after it, dropped after the decode. Returns the padding, the first position with
        logits and the first wanted, both counted from `start`.
        """
        n = len(chunk)
        padding = max(self.min_width - n, 0)
        wanted = min(max(first_out - start, 0), n)
        flagged = min(wanted, n + padding - self.min_width) if wanted < n else n + padding
        self._batch.n_tokens = n + padding
        self._in_sequence(0, 0, n + padding)
        self._batch_tokens[:n] = chunk
        if padding:
            self._batch_tokens[n : n + padding] = chunk[-1]
        self._batch_pos[: n + padding] = self._positions[start : start + n + padding]
        self._batch_logits[:flagged] = 0
        self._batch_logits[flagged : n + padding] = 1
        return padding, flagged, wanted

    # --- the native calls, a thin layer a model without weights can replace -------
    # llama_cpp's bindings return Any (its ctypes_function decorator is untyped): a result
    # returned on is declared as what ctypes makes of the C type.

    def _decode(self) -> int:
        status: int = llama.llama_decode(self._ctx, self._batch)
        return status

    def _outputs(self, count: int) -> np.ndarray:
        """The last decode's logits [count, n_vocab], in batch order: a view of llama.cpp's
        buffer."""
        return self._view(llama.llama_get_logits(self._ctx), self.n_vocab)[:count]

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

    def _set_sampler(self, width: int | None, seq_id: int = 0) -> None:
        """From the next decode on, have llama.cpp choose each of the sequence's rows' `width`
        best tokens on the output layer's device (a top-k chain); None: whole rows again.
        The chain lives until it is replaced: the context only refers to it."""
        previous = self._samplers.get(seq_id)
        if (previous[0] if previous else None) == width:
            return
        chain = None
        if width is not None:
            chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_k(width))
        attached = llama.llama_set_sampler(self._ctx, seq_id, chain)  # None detaches
        if chain is not None and not attached:
            llama.llama_sampler_free(chain)
            raise SpecrunError(f"{self.name}: llama.cpp refused a top-{width} backend sampler")
        if width is not None and chain is not None:
            self._samplers[seq_id] = (width, chain)
        else:
            self._samplers.pop(seq_id, None)
        if previous is not None:
            llama.llama_sampler_free(previous[1])

    def _candidates(self, count: int, width: int, after: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The last decode's candidates [count, width] (ids, logits) of the `count` rows before
        its last `after`, in batch order: views of llama.cpp's buffers, whose rows lie a
        vocabulary apart."""
        first = -(count + after)
        found = llama.llama_get_sampled_candidates_count_ith(self._ctx, first)
        if found != width:
            raise SpecrunError(f"{self.name}: the backend chose {found} candidates, not {width}")
        ids = llama.llama_get_sampled_candidates_ith(self._ctx, first)
        values = llama.llama_get_sampled_logits_ith(self._ctx, first)
        rows = slice(count), slice(width)
        return self._view(ids, self.n_vocab)[rows], self._view(values, self.n_vocab)[rows]

    def _probe_backend_sampling(self) -> bool:
        """Whether this build's backend chooses candidates on the output layer's device: one
        token decoded with a top-2 sampler attached (llama.cpp accepts any chain and runs
        what its backend cannot on the CPU, whole rows and all)."""
        try:
            self._set_sampler(2)
            self._fill_batch([0], 0, 0)
            decoded = self._decode() == 0
            return decoded and llama.llama_get_sampled_candidates_count_ith(self._ctx, -1) == 2
        except SpecrunError:  # refused outright (llama.cpp's tensor-split mode)
            return False
        finally:
            self._set_sampler(None)
            self.reset()
            raise_pending()

    def _drop(self, cache: SequenceCache, keep: int) -> bool:
        dropped: bool = llama.llama_memory_seq_rm(self._memory, cache.seq_id, keep, -1)
        return dropped

    def _clear(self) -> None:
        llama.llama_memory_clear(self._memory, True)

    def _truncate(self, cache: SequenceCache, keep: int) -> None:
        """Drop the sequence's cached positions from `keep` on; a cache that cannot
        (recurrent) starts over, every sequence of it."""
        if not self._drop(cache, keep):
            self.reset()
            return
        del cache.tokens[keep:]
        cache.held = keep
        if self.hidden_rows is not None:
            self.hidden_rows.truncate(keep)

    def reset(self) -> None:
        self._clear()
        for cache in self.caches:
            del cache.tokens[:]
            cache.held = 0
        if self.hidden_rows is not None:
            self.hidden_rows.truncate(0)

    # --- hidden states for a head ---------------------------------------------------

    def has_layers(self, layers: Sequence[int]) -> bool:
        """Whether `layers` (a head's, or those a head is trained on) are all this model's."""
        return bool(layers) and 0 <= min(layers) and max(layers) < self.n_layer

    def keep_hidden(self, layers: Sequence[int] = ()) -> HiddenRows:
        """Keep, from each decode on, every position's hidden state for a head: the inputs
        of `layers`, side by side (EAGLE-3), or with none given, the last hidden state
        (what an MTP layer reads). llama.cpp then computes every position of a pass through
        the last layer, not only those with logits: a verify already does."""
        width = self.n_embd * (len(layers) or 1)
        budget = HIDDEN_ROWS_BYTES // (width * 4)
        self.hidden_rows = HiddenRows(width, max(2 * self.n_batch, min(self.n_ctx, budget)))
        self._hidden_layers = tuple(layers)
        for layer in dict.fromkeys(layers):
            ext.function("llama_set_embeddings_layer_inp")(self._ctx, layer, True)
        if not layers:
            ext.function("llama_set_embeddings_nextn")(self._ctx, True, False)
        self.reset()  # what the cache held has no rows
        return self.hidden_rows

    def _hidden_outputs(self, count: int) -> list[np.ndarray]:
        """The last decode's hidden rows [count, n_embd] per kept layer, in batch order."""
        if not self._hidden_layers:
            pointers = [ext.function("llama_get_embeddings_nextn")(self._ctx)]
        else:
            get = ext.function("llama_get_embeddings_layer_inp")
            pointers = [get(self._ctx, layer) for layer in self._hidden_layers]
        return [self._view(pointer, self.n_embd)[:count] for pointer in pointers]

    def probe_invariance(self) -> Invariance:
        """Evaluate the last PROBE_POSITIONS positions of a fixed sequence one per pass, in
        one batch, in two, and in each way `Invariance` names; decode from now on in the
        first way whose logits are those of one position per pass, bit for bit (a kernel
        that differs at all differs here)."""
        sequence = [(7919 * i + 13) % self.n_vocab for i in range(PROBE_POSITIONS + 4)]
        ends = range(len(sequence) - PROBE_POSITIONS + 1, len(sequence) + 1)

        def evaluate(
            min_width: int, max_width: int | None, stops: Sequence[int] = ends[-1:]
        ) -> np.ndarray:
            self.reset()
            self.min_width, self.max_width = min_width, max_width
            rows = [
                self.logits(sequence[:stop], stop - start)
                for start, stop in zip([ends[0] - 1, *stops], stops)
            ]
            return np.concatenate(rows)

        try:
            single = evaluate(1, 1)
            batch = evaluate(1, None)
            # Widths 2 and 7: other widths, other slots. Equal, batches agree among themselves.
            batches_agree = np.array_equal(batch, evaluate(1, None, [ends[1], ends[-1]]))
            if batches_agree and np.array_equal(batch, single):
                found = Invariance("batch", 0.0)
            elif batches_agree and np.array_equal(batch, evaluate(2, None, ends)):
                found = Invariance("padded", float(np.abs(batch - single).max()))
            else:
                width = next(
                    (w for w in CHUNK_WIDTHS if np.array_equal(single, evaluate(1, w))), None
                )
                found = Invariance(
                    "chunked" if width else "serial", float(np.abs(batch - single).max()), width
                )
        finally:
            self.reset()
        self.min_width = 2 if found.mode == "padded" else 1
        self.max_width = found.width or (1 if found.mode == "serial" else None)
        return found

    # --- metadata ----------------------------------------------------------------------

    @property
    def chat_template(self) -> str | None:
        template = llama.llama_model_chat_template(self._model, None)
        return template.decode("utf-8") if template else None

    def close(self) -> None:
        """Free the native objects once: the handles are taken from `self` before they are
        freed, so a signal during close, or `__del__` after it, cannot free them again."""
        handles = (
            getattr(self, "_batch", None),
            getattr(self, "_ctx", None),
            getattr(self, "_model", None),
            getattr(self, "_samplers", {}),
        )
        self._batch = self._ctx = self._model = None
        self._samplers = {}
        batch, ctx, model, samplers = handles
        if batch is not None:
            llama.llama_batch_free(batch)
        if ctx:
            llama.llama_synchronize(ctx)  # its device work done first (DESIGN.md, Vulkan)
            llama.llama_free(ctx)
        for _, chain in samplers.values():  # after the context that refers to them
            llama.llama_sampler_free(chain)
        if model:
            llama.llama_model_free(model)

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _cut(runs: list[Run], n_batch: int) -> list[list[Run]]:
    """The runs cut into decodes of `n_batch` positions at most, the last ending with the last
    run (the first decode takes what is left over)."""
    total = sum(run.end - run.start for run in runs)
    decodes: list[list[Run]] = [[]]
    room = total % n_batch or n_batch
    for run in runs:
        start = run.start
        while start < run.end:
            if not room:
                decodes.append([])
                room = n_batch
            end = min(run.end, start + room)
            decodes[-1].append(run._replace(start=start, end=end))
            room -= end - start
            start = end
    return [runs for runs in decodes if runs]


def _joined(earlier: Rows | None, later: Rows) -> Rows:
    """A call's rows from two decodes, in order (its rows were more than one decode holds)."""
    if isinstance(earlier, CandidateRows) and isinstance(later, CandidateRows):
        return CandidateRows(
            np.concatenate([earlier.ids, later.ids]), np.concatenate([earlier.logits, later.logits])
        )
    assert isinstance(earlier, np.ndarray) and isinstance(later, np.ndarray)
    return np.concatenate([earlier, later])


def model_architecture(model: int) -> str:
    """The GGUF's `general.architecture` (llama, glm4moe, eagle3, ...)."""
    buffer = ctypes.create_string_buffer(64)
    llama.llama_model_meta_val_str(model, b"general.architecture", buffer, len(buffer))
    return buffer.value.decode("utf-8", errors="replace")
