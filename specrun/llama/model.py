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
from typing import NamedTuple, overload

import llama_cpp as llama
import numpy as np

from specrun.core.heads import HiddenRows
from specrun.core.model import BackendSampling
from specrun.core.sampling import CandidateRows, Rows
from specrun.core.sequence import Continuation, Tokens, common_prefix_length
from specrun.core.trees import DraftTree
from specrun.errors import SpecrunError
from specrun.llama.batch import Batch, DecodeFailed, hidden_sources
from specrun.llama.devices import amx_allowed, build_info, gpu_offload_supported
from specrun.llama.diagnose import load_failure
from specrun.llama.gguf import check_gguf_header, tensor_table
from specrun.llama.invariance import probe_invariance
from specrun.llama.native import clear_log, set_verbose
from specrun.llama.params import context_params, load_params
from specrun.llama.samplers import BackendSamplers, backend_sampling_wanted
from specrun.llama.tuning import Tuning
from specrun.llama.vocab import Vocabulary
from specrun.system.cpus import physical_cores
from specrun.system.interrupts import raise_pending

DEFAULT_CTX = 4096  # tokens; less where the model was trained for less
# The drafts whose graphs read a target's hidden states, by architecture: what each is, and
# how --draft names it.
FED_BY_HIDDEN_STATES = {
    "eagle3": ("an EAGLE-3 head", "eagle3"),
    "dflash": ("a DFlash or DSpark block draft", "dflash"),
}
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
    # Its hidden rows kept for each draft that reads them (`keep_hidden`), with what that
    # draft reads (`batch.hidden_sources`): each draft its own, released as it takes them in.
    hidden: list[tuple[tuple[int, ...], HiddenRows]] = field(default_factory=list)


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
    first_out: int = field(default=0, init=False)  # its first position with rows


class Part(NamedTuple):
    """A call's positions start..end in one decode, as the batch takes them (a `Run`: its
    sequence, those tokens, `padding` copies of the last after them, dropped after the
    decode, and logits from `tokens[logits_from]` on), with `width` candidates a row where
    the device chooses them."""

    seq_id: int
    tokens: Sequence[int]
    start: int
    logits_from: int
    padding: int
    call: Call
    end: int
    width: int | None

    @classmethod
    def of(
        cls, call: Call, start: int, end: int, logits_from: int, padding: int, width: int | None
    ) -> Part:
        tokens = call.seq[start:end]
        return cls(call.cache.seq_id, tokens, start, logits_from, padding, call, end, width)


@dataclass(frozen=True)
class _Branches:
    """A token tree in the cache after `tree_logits`: where its nodes begin, the tree, and
    the sequence holding each leaf's branch (every node is in those of the leaves below it)."""

    start: int
    tree: DraftTree
    sequence_of_leaf: dict[int, int]


class Model(Vocabulary):
    """A GGUF model with one context, its KV cache holding `self.tokens`."""

    batch_type = Batch  # what decodes: a model without weights (bench/) replaces its native calls

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
        tree_branches: int = 0,
        tuning: Tuning = Tuning(),
    ) -> None:
        """`sequences` > 1: as many sequences share the context, each with `n_ctx` positions,
        decoded together by `decode_calls`: in one KV pool, or with `reproducible` each in a
        stream of its own, decoded apart (DESIGN.md, Slots). `tree_branches`: token trees of
        that many leaves at most are verified in one pass (`tree_logits`), one sequence's
        only, decoded as any other pass (not under `reproducible`'s shapes). `tuning`: the
        KV cache's types, flash attention, mmap/mlock, batch threads and RoPE scaling; a
        context past the trained one only where RoPE scaling reaches it (`Rope.reach`)."""
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
            tuning=tuning,
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
        fed = FED_BY_HIDDEN_STATES.get(self.architecture)
        if fed is not None:  # its graph needs the target's hidden states
            what, spec = fed
            self.close()
            raise SpecrunError(
                f"{self.name} is {what}: it drafts for the target it was made for "
                f"(as the draft {spec}:{self.name}) and cannot run as a model"
            )

        threads = threads or physical_cores()
        # Reproducible decoding keeps each sequence's cells where a context of its own would.
        shared_pool = sequences > 1 and not reproducible
        try:
            n_ctx = self._context_size(n_ctx, tuning)
        except SpecrunError:
            self.close()
            raise
        branches = tree_branches if sequences == 1 and not reproducible else 0
        ctx_params = context_params(
            n_ctx,
            n_batch,
            threads,
            sequences,
            shared_pool=shared_pool,
            branches=branches,
            tuning=tuning,
        )
        self._ctx = llama.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            self.close()
            raise load_failure(f"cannot create a context for {self.path}")
        # Each sequence's share; a tree's nodes have room of their own past it.
        self.n_ctx = n_ctx if branches else llama.llama_n_ctx(self._ctx) // sequences
        self.n_batch = llama.llama_n_batch(self._ctx)  # llama.cpp caps it at the context size
        self.threads = threads
        self.threads_batch = llama.llama_n_threads_batch(self._ctx)
        self.tuning = tuning
        self._memory = llama.llama_get_memory(self._ctx)
        self._init_cache(n_batch, sequences, shared_pool=shared_pool, branches=branches)
        self.invariance = probe_invariance(self) if reproducible else None
        offloaded = self.can_offload and gpu_layers > 0
        on_vulkan = offloaded and not self.devices and "Vulkan" in build_info().gpu_backends
        try:
            wanted = backend_sampling_wanted(
                backend_sampling, offloaded=offloaded, vulkan=on_vulkan, remote=bool(self.devices)
            )
            self.samples_on_device = wanted and self._probe_backend_sampling()
            if backend_sampling == "on" and not self.samples_on_device:
                raise SpecrunError(
                    "this build's backend cannot choose candidates on its device; "
                    "use `backend_sampling` off"
                )
        except SpecrunError as error:
            self.close()
            raise SpecrunError(f"{self.path.name}: {error}") from None

    def _context_size(self, asked: int | None, tuning: Tuning) -> int:
        """The context to ask llama.cpp for: `asked` (the trained one where None), no more
        than the model reaches (its trained context, or RoPE scaling's `reach`); with a
        quantized KV cache, each head's values whole blocks of its types."""
        if tuning.cache.quantized:
            head_k, head_v = self._head_sizes()
            tuning.cache.check_heads(head_k, head_v, self.name)
        tuning.rope.check_context(asked or 0, self.n_ctx_train, self.name)
        original = self._metadata_number("rope.scaling.original_context_length")
        reach = tuning.rope.reach(self.n_ctx_train, original)
        self.n_ctx_reach = reach  # None: no bound (the base frequency chosen for the context)
        n_ctx = asked or self.n_ctx_train
        return n_ctx if reach is None else min(n_ctx, reach)

    def _head_sizes(self) -> tuple[int, int]:
        """Values per attention head in K and in V, as the GGUF says (else n_embd / n_head)."""
        n_head = llama.llama_model_n_head(self._model)
        default = self.n_embd // n_head if n_head else self.n_embd
        key = self._metadata_number("attention.key_length")
        value = self._metadata_number("attention.value_length")
        return key or default, value or default

    def _metadata_number(self, key: str) -> int | None:
        """The GGUF's `{architecture}.{key}`, where it has it."""
        buffer = ctypes.create_string_buffer(32)
        name = f"{self.architecture}.{key}".encode()
        found = llama.llama_model_meta_val_str(self._model, name, buffer, len(buffer))
        return int(buffer.value) if found > 0 and buffer.value.isdigit() else None

    def _probe_backend_sampling(self) -> bool:
        try:
            return self.samplers.probe(self.batch)
        finally:
            self.reset()
            raise_pending()

    def _init_cache(
        self, n_batch: int, sequences: int = 1, *, shared_pool: bool = False, branches: int = 0
    ) -> None:
        """The Python side of the cache: the batch it is fed by and the sequences it holds
        (`shared_pool`: in one pool of cells, which they may share; `branches`: a token tree's
        sequences besides the one)."""
        self.shared_pool = shared_pool
        self.tree_branches = branches
        self.batch = self.batch_type(
            self._ctx,
            n_batch,
            self.n_vocab,
            self.n_embd,
            self.name,
            sequences_per_position=1 + branches,
        )
        self._branches: _Branches | None = None  # a verified tree's, until `keep_path`
        self.samplers = BackendSamplers(self._ctx, self.name)
        self.piece = lru_cache(maxsize=None)(self._piece)
        self.is_eog = lru_cache(maxsize=None)(self._is_eog)  # asked of every committed token
        self.caches = [SequenceCache(seq_id) for seq_id in range(sequences)]
        self._seq = self.caches[0]  # the one `logits` keeps
        self.n_evaluated = 0  # tokens decoded so far: how much work the cache saved
        # The first decode of a batch shape (positions, positions with logits) sets up its
        # graph and buffers and costs up to twice a later one: not a sample of its cost.
        self._shapes_decoded: set[tuple[int, int]] = set()
        self.first_of_shape = False  # whether the last `logits` call decoded a new shape
        self.shared_rows = self.shared_with = 0  # other sequences' rows in that decode
        self.min_width = 1  # no decode spans fewer positions ("padded")
        self.max_width: int | None = None  # positions with logits decoded at most this many a pass
        self.samples_on_device = False  # whether `logits(top=...)` returns candidates

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
        The one-sequence case of `decode_calls`.
        """
        call = Call(self._seq, seq, last, view, top)
        self.decode_calls((call,))
        self.first_of_shape = call.first_of_shape
        self.shared_rows, self.shared_with = call.shared_rows, call.shared_with
        return call.rows if call.rows is not None else np.empty((0, self.n_vocab), np.float32)

    def decode_calls(self, calls: Sequence[Call]) -> None:
        """Serve sequences' `logits` calls (`Call.rows`: views of llama.cpp's buffer, valid until
        this model's next decode, where the call asks for a view and its rows all come from the
        last decode; else copies).

        Where the decodes are shaped (`min_width`, `max_width`: reproducible decoding), or
        there is one call, each call is decoded apart in the passes `_spans` gives; else every
        call's new positions go in one batch where they fit in `n_batch`, else in as few as
        they fit in, the rows asked for in the last.
        """
        self._drop_branches()  # a tree verified and not followed by `keep_path`
        # A lone call keeps its chain through a pass without rows: no other sequence's rows
        # are in its decodes.
        alone = len(calls) == 1
        if self.samplers.attached:
            self.samplers.keep_only({call.cache.seq_id for call in calls if call.last or alone})
        parts: list[Part] = []
        shaped = alone or self.min_width > 1 or self.max_width is not None
        for call in calls:
            end = len(call.seq)
            self._check(end, call.last)
            width = self._width(call.top)
            if call.last:  # a pass without rows leaves the sampler as the last one with rows
                self.samplers.attach(call.cache.seq_id, width)
            first_out = call.first_out = end - call.last
            keep = self._reuse(call.cache, call.seq, first_out, end)
            if keep < first_out and self.shared_pool:
                keep = self._borrow(call.cache, call.seq, keep, first_out)
            call.rows, call.first_of_shape = None, False
            if shaped:
                parts.extend(self._shaped_parts(call, keep, end, width))
                continue
            if keep < first_out:  # a prompt (or a draft catching up): another may hold it
                parts.append(Part.of(call, keep, first_out, first_out - keep, 0, None))
            if call.last:
                parts.append(Part.of(call, first_out, end, 0, 0, width))
        # Shaped: a decode per part. Else positions without rows first: every call's rows
        # then come from the last decode.
        decodes = [[part] for part in parts] if shaped else _cut(parts, self.n_batch)
        for number, decode in enumerate(decodes, 1):
            self._decode_parts(decode, last=number == len(decodes))

    def tree_logits(self, seq: Sequence[int], tree: DraftTree) -> np.ndarray:
        """Make the cache hold `seq`; return the logits of its last position and of each node
        of `tree` after it ([1 + nodes, n_vocab], a view valid until the next decode), all in
        one pass. Each leaf's branch is a sequence of its own that shares `seq`'s cells, so a
        node attends to the text and its own ancestors only. `keep_path` then keeps the
        accepted nodes in the cache and drops the others."""
        leaves = tree.leaves()
        if not 0 < len(leaves) <= self.tree_branches:
            raise ValueError(
                f"a tree of {len(leaves)} leaves; this model verifies up to {self.tree_branches}"
            )
        cache, end = self._seq, len(seq)
        if cache.hidden:  # a head's rows follow one chain of positions
            raise ValueError("a model that keeps hidden rows for a head verifies chains")
        depths = tree.depths()
        self._check(end + max(depths), 1)
        self._drop_branches()
        if self._reuse(cache, seq, end - 1, end) < end - 1:  # more than a round committed
            self.logits(seq[: end - 1], 0)
        sequence_of_leaf = {leaf: 1 + k for k, leaf in enumerate(leaves)}
        sequences: list[list[int]] = [[] for _ in tree.tokens]
        for leaf, seq_id in sequence_of_leaf.items():
            for node in tree.path(leaf):
                sequences[node].append(seq_id)
            self._copy_cells(0, seq_id, -1, -1)
        self._branches = _Branches(end, tree, sequence_of_leaf)
        cache.held = end + max(depths)
        try:
            self.batch.decode_tree(
                [seq[-1], *tree.tokens],
                [end - 1, *(end - 1 + depth for depth in depths)],
                [[0, *sequence_of_leaf.values()], *sequences],
            )
        except DecodeFailed:
            self._drop_branches()
            self._truncate(cache, end - 1)
            raise_pending()
            raise
        cache.tokens.append(seq[-1])
        self._count(cache, 1 + len(tree))
        self.first_of_shape = self._first_decode_of(1 + len(tree), 1 + len(tree))
        self.shared_rows = self.shared_with = 0
        return self.batch.all_logits()[: 1 + len(tree)]

    def keep_path(self, path: Sequence[int]) -> None:
        """After `tree_logits`: keep the nodes of `path` (from the root down) in the cache
        after the text, as a chain verify keeps its accepted drafts, and drop every branch."""
        branches = self._branches
        assert branches is not None, "keep_path follows tree_logits"
        if path:
            tree, start = branches.tree, branches.start
            leaf = next(leaf for leaf in tree.leaves() if path[-1] in tree.path(leaf))
            seq_id = branches.sequence_of_leaf[leaf]
            self._copy_cells(seq_id, 0, start, start + len(path))
            self._seq.tokens.extend(tree.tokens[node] for node in path)
        self._drop_branches()

    def _drop_branches(self) -> None:
        """Forget a verified tree's branches: their cells are freed but those the sequence
        holds (the text, and what `keep_path` gave it)."""
        if self._branches is None:
            return
        for seq_id in self._branches.sequence_of_leaf.values():
            self._drop_sequence(seq_id)
        self._branches = None
        self._seq.held = len(self._seq.tokens)

    def _shaped_parts(self, call: Call, keep: int, end: int, width: int | None) -> list[Part]:
        """A call's decodes as `_spans` shapes them: those narrower than `min_width` padded
        with copies of the last token (dropped after the decode), and under `min_width` at
        least that many positions with logits, since llama.cpp runs the last layer's
        feed-forward and the output layer only on the positions with logits."""
        first_out, parts = call.first_out, []
        for start, stop in self._spans(keep, end, first_out):
            n = stop - start
            padding = max(self.min_width - n, 0)
            wanted = min(max(first_out - start, 0), n)
            flagged = min(wanted, n + padding - self.min_width) if wanted < n else n + padding
            parts.append(Part.of(call, start, stop, flagged, padding, width))
        return parts

    def _check(self, length: int, last: int) -> None:
        if length > self.n_ctx:
            raise SpecrunError(
                f"{self.name}: sequence of {length} tokens exceeds the context ({self.n_ctx})"
            )
        if not 0 <= last <= length:
            raise ValueError(f"cannot return the last {last} of {length} positions")

    def _width(self, top: int | None) -> int | None:
        """The candidates a row leaves the device as, for `top`; None: the whole row."""
        return top if self.samples_on_device and top is not None and top < self.n_vocab else None

    def _reuse(self, cache: SequenceCache, seq: Sequence[int], first_out: int, end: int) -> int:
        """Keep the longest prefix of `seq` (`end` positions) the cache holds, short of
        `first_out`, its first position with rows (and of `min_width`), dropping the rest; how
        many positions that is."""
        # Of an append-only sequence seen before, only what follows the part held then can differ.
        base, n_base = (seq.base, seq.n) if isinstance(seq, Continuation) else (None, 0)
        held = len(cache.tokens)
        start = min(cache.seen, held) if base is not None and base is cache.base else 0
        keep = start + common_prefix_length(cache.tokens[start:], seq[start:held])
        cache.base, cache.seen = base, n_base  # true from here on: the cache holds a prefix of seq
        keep = min(keep, first_out)
        if keep < end:  # a decode narrower than `min_width` starts earlier
            keep = min(keep, max(end - self.min_width, 0))
        if keep < cache.held:  # else there is nothing to drop: no native call
            self._truncate(cache, keep)
        return len(cache.tokens)

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
        for _, rows in cache.hidden:  # no rows for the borrowed positions: a head starts there
            rows.truncate(most)
        return most

    def _decode_parts(self, parts: Sequence[Part], *, last: bool) -> None:
        """One decode: each part's positions, then its rows to its call."""
        for part in parts:  # what the decode may write, until the cache's tokens say
            part.call.cache.held = max(part.call.cache.held, part.end + part.padding)
        try:
            self.batch.decode(parts)
        except DecodeFailed:  # forget what each sequence's part may have left in the cache
            for part in parts:
                self._truncate(part.call.cache, part.start)
            raise_pending()  # a decode stopped by Ctrl-C is the signal's doing, not an error
            raise
        n_out = self.batch.n_outputs
        first_of_shape = self._first_decode_of(self.batch.n_tokens, n_out)
        for i, part in enumerate(parts):
            call, cache = part.call, part.call.cache
            if cache.hidden:
                kept, n = self.batch.hidden(i), len(part.tokens)
                for sources, kept_rows in cache.hidden:
                    kept_rows.write(part.start, *(kept[source][:n] for source in sources))
            cache.tokens.extend(part.tokens)
            if not part.padding or self._drop(cache, part.end):  # padding kept where it stays
                cache.held = part.end
            self._count(cache, len(part.tokens))
            call.first_of_shape |= first_of_shape
            first_out = call.first_out
            if part.end <= first_out:
                continue
            begins = part.start <= first_out  # the call's first row is in this decode
            wanted = max(part.start, first_out)
            skip, count = wanted - part.start - part.logits_from, part.end - wanted
            rows: Rows
            if part.width is not None:
                ids, values = self.batch.candidates(i, part.width)
                rows = CandidateRows(
                    ids[skip : skip + count].copy(), values[skip : skip + count].copy()
                )
            else:
                view = self.batch.logits(i)[skip : skip + count]
                # A view where every row is in this decode, the last: none comes after it.
                rows = view if last and call.view and begins else view.copy()
            call.rows = rows if begins else _joined(call.rows, rows)
            call.shared_rows = n_out - self.batch.outputs_of(i)
            call.shared_with = self.batch.runs_with_rows - 1

    def _first_decode_of(self, positions: int, outputs: int) -> bool:
        """Whether the decode about to run is the first of its shape (`first_of_shape`)."""
        shape = (positions, outputs)
        first = shape not in self._shapes_decoded
        self._shapes_decoded.add(shape)
        return first

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

    def _count(self, cache: SequenceCache, decoded: int) -> None:
        cache.n_evaluated += decoded
        self.n_evaluated += decoded
        raise_pending()

    def _drop(self, cache: SequenceCache, keep: int) -> bool:
        dropped: bool = llama.llama_memory_seq_rm(self._memory, cache.seq_id, keep, -1)
        return dropped

    def _clear(self) -> None:
        llama.llama_memory_clear(self._memory, True)

    def _copy_cells(self, source: int, destination: int, start: int, end: int) -> None:
        """Put sequence `source`'s cells of positions start..end (-1: all) in `destination`
        too: one pool's cells are shared, not copied."""
        llama.llama_memory_seq_cp(self._memory, source, destination, start, end)

    def _drop_sequence(self, seq_id: int) -> None:
        llama.llama_memory_seq_rm(self._memory, seq_id, -1, -1)

    def _truncate(self, cache: SequenceCache, keep: int) -> None:
        """Drop the sequence's cached positions from `keep` on; a cache that cannot
        (recurrent) starts over, every sequence of it."""
        if not self._drop(cache, keep):
            self.reset()
            return
        del cache.tokens[keep:]
        cache.held = keep
        for _, rows in cache.hidden:
            rows.truncate(keep)

    # --- a sequence's state in host memory (specrun.llama.prompt_cache) ---------------

    def sequence_state(self, cache: SequenceCache) -> bytearray:
        """A copy of what the KV cache holds for the sequence (its cells of the positions
        `tokens` holds), as llama.cpp writes a sequence's state: `restore_sequence` puts it in
        any sequence of this model. As many bytes as those cells take in the KV cache."""
        self._drop_branches()
        if cache.held > len(cache.tokens):  # padding or a failed decode's cells: not the tokens'
            self._truncate(cache, len(cache.tokens))
        size = llama.llama_state_seq_get_size(self._ctx, cache.seq_id)
        state = bytearray(size)
        buffer = (ctypes.c_uint8 * size).from_buffer(state)
        written = llama.llama_state_seq_get_data(self._ctx, buffer, size, cache.seq_id)
        del buffer  # the bytearray may be resized again once no ctypes view holds it
        del state[written:]
        return state

    def restore_sequence(
        self, cache: SequenceCache, tokens: Sequence[int], state: bytearray
    ) -> bool:
        """Make the sequence hold `tokens` from their state (`sequence_state`), in place of what
        it held; False where llama.cpp could not (the sequence then holds nothing)."""
        self._drop_branches()
        buffer = (ctypes.c_uint8 * len(state)).from_buffer(state)
        read = llama.llama_state_seq_set_data(self._ctx, buffer, len(state), cache.seq_id)
        del buffer
        restored = list(tokens) if read == len(state) else []
        if not restored:
            self._drop(cache, 0)
        cache.tokens[:] = restored
        cache.held = len(restored)
        cache.base, cache.seen = None, 0
        for _, rows in cache.hidden:  # no rows for the restored positions: a head starts after
            rows.truncate(0)
        return bool(restored)

    def reset(self) -> None:
        self._branches = None
        self._clear()
        for cache in self.caches:
            del cache.tokens[:]
            cache.held = 0
            for _, rows in cache.hidden:
                rows.truncate(0)

    # --- hidden states for a head ---------------------------------------------------

    def has_layers(self, layers: Sequence[int]) -> bool:
        """Whether `layers` (a head's, or those a head is trained on) are all this model's."""
        return bool(layers) and 0 <= min(layers) and max(layers) < self.n_layer

    def keep_hidden(self, layers: Sequence[int] = ()) -> list[HiddenRows]:
        """Keep, from each decode on, every position's hidden state for one more draft (a
        head, a block draft), each sequence its own rows: the inputs of `layers`, side by side
        (EAGLE-3, DFlash), or with none given, the last hidden state (what an MTP layer reads).
        Returns each sequence's rows; each draft's are its own, released as it takes them in."""
        sources = hidden_sources(layers)
        width = self.n_embd * len(sources)
        budget = HIDDEN_ROWS_BYTES // (width * 4 * len(self.caches))
        capacity = max(2 * self.n_batch, min(self.n_ctx, budget))
        for cache in self.caches:
            cache.hidden.append((sources, HiddenRows(width, capacity)))
        self.batch.keep_hidden(layers)
        self.reset()  # what the cache held has no rows
        return [cache.hidden[-1][1] for cache in self.caches]

    def sequence_rows(self, seq_id: int, first: HiddenRows) -> HiddenRows:
        """Sequence `seq_id`'s rows kept for the draft whose first sequence's rows are `first`
        (`keep_hidden`'s first): a slot's head or block draft reads its own sequence's."""
        index = next(i for i, (_, rows) in enumerate(self.caches[0].hidden) if rows is first)
        return self.caches[seq_id].hidden[index][1]

    # --- metadata ----------------------------------------------------------------------

    @property
    def chat_template(self) -> str | None:
        template = llama.llama_model_chat_template(self._model, None)
        return template.decode("utf-8") if template else None

    def close(self) -> None:
        """Free the native objects once: the handles are taken from `self` before they are
        freed, so a signal during close, or `__del__` after it, cannot free them again."""
        handles = (
            getattr(self, "batch", None),
            getattr(self, "_ctx", None),
            getattr(self, "_model", None),
            getattr(self, "samplers", None),
        )
        self.batch = self.samplers = None  # type: ignore[assignment]
        self._ctx = self._model = None
        batch, ctx, model, samplers = handles
        if batch is not None:
            batch.close()
        if ctx:
            llama.llama_synchronize(ctx)  # its device work done first (DESIGN.md, Vulkan)
            llama.llama_free(ctx)
        if samplers is not None:  # after the context that refers to them
            samplers.close()
        if model:
            llama.llama_model_free(model)

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _cut(parts: list[Part], n_batch: int) -> list[list[Part]]:
    """The parts cut into decodes of `n_batch` positions at most, the last ending with the last
    part (the first decode takes what is left over)."""
    total = sum(part.end - part.start for part in parts)
    decodes: list[list[Part]] = [[]]
    room = total % n_batch or n_batch
    for part in parts:
        start = part.start
        while start < part.end:
            if not room:
                decodes.append([])
                room = n_batch
            end = min(part.end, start + room)
            decodes[-1].append(_piece(part, start, end))
            room -= end - start
            start = end
    return [parts for parts in decodes if parts]


def _piece(part: Part, start: int, end: int) -> Part:
    """Positions start..end of a part that `_cut` splits: its rows are all or none."""
    logits_from = 0 if part.logits_from == 0 else end - start
    return Part.of(part.call, start, end, logits_from, 0, part.width)


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
