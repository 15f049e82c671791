"""Block drafts over llama.cpp: a DFlash or DSpark GGUF (architecture `dflash`).

llama.cpp's `dflash` graph has two modes, chosen by the batch: an embedding batch of the
target's layer inputs (its `target_layers`, side by side) is projected by the draft's `fc`
and written into the draft's K/V cache at the target's positions; a token batch is the
noise block [anchor, mask, ...], decoded with non-causal attention over the cache and
itself, whose logits rows are the draft. The draft borrows the target's token embeddings
and output layer where it has none (its context names the target's as `ctx_other`). A
DSpark draft is the same graph with a Markov head (`markov_w1`), which biases each row by
the previous row's best token, and an anchor-first layout (`dflash.sample_from_anchor`):
its rows from the anchor's on are the draft, so a block of B drafts B tokens, not B - 1.

Which target a block draft can serve is checked before any generation: `open_block`
refuses a mismatch in one line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import llama_cpp as llama
import numpy as np

from specrun.core.heads import HiddenRows
from specrun.errors import SpecrunError
from specrun.llama import ext
from specrun.llama.compat import check_compatible
from specrun.llama.devices import amx_allowed, build_info
from specrun.llama.diagnose import load_failure
from specrun.llama.draft_context import DraftContext, embedding_row
from specrun.llama.gguf import check_gguf_header, read_gguf_info, tensor_table
from specrun.llama.heads import check_recorded_target, head_context_params, metadata
from specrun.llama.model import Model
from specrun.llama.native import clear_log
from specrun.llama.params import load_params
from specrun.system.interrupts import raise_pending

DEFAULT_BLOCK_SIZE = 16  # what llama.cpp assumes where a file names none


class NativeBlock(DraftContext):
    """A block draft's context and batch."""

    what = "block draft"

    def __init__(
        self,
        kind: Literal["dflash", "dspark"],
        file: Path,
        model: int,
        ctx_params: llama.llama_context_params,
        *,
        block_size: int,
        anchor_first: bool,
        causal: bool,
        owns_model: bool,
    ) -> None:
        self.kind = kind
        self.path = file
        self.block_size = block_size
        self.anchor_first = anchor_first
        # DFlash's block is [anchor, B - 1 masks], its rows after the anchor's the draft;
        # anchor-first DSpark reads B rows from the anchor's on.
        self.longest = block_size if anchor_first else block_size - 1
        self._made = (kind, file, model, ctx_params, causal)  # what a twin is made of
        super().__init__(f"{kind}:{file.name}", model, ctx_params, owns_model=owns_model)
        llama.llama_set_causal_attn(self._ctx, causal)
        self.mask = llama.llama_vocab_mask(self.vocab)
        self._logits = np.empty((self.longest, self.n_vocab), np.float32)

    def twin(self) -> NativeBlock:
        """Another context of this draft on the same weights, for another sequence of the
        target (a slot of a parallel engine): its own cache."""
        kind, file, model, ctx_params, causal = self._made
        twin = NativeBlock(
            kind,
            file,
            model,
            ctx_params,
            block_size=self.block_size,
            anchor_first=self.anchor_first,
            causal=causal,
            owns_model=False,
        )
        self._twinned(twin)
        return twin

    def inject(self, position: int, states: np.ndarray) -> None:
        states = np.ascontiguousarray(states, dtype=np.float32)
        for start in range(0, len(states), self.n_ubatch):
            end = min(start + self.n_ubatch, len(states))
            llama.llama_batch_ext_clear(self._batch)
            for i in range(start, end):
                index = llama.llama_batch_ext_add_embd(self._batch, 0, embedding_row(states, i))
                self._set_pos(index, position + i)
            self._process()

    def draft(self, position: int, anchor: int, n: int) -> np.ndarray:
        assert 0 < n <= self.longest, (n, self.longest)
        first = 0 if self.anchor_first else 1  # the block's first row that is a draft
        llama.llama_batch_ext_clear(self._batch)
        for i in range(n + first):
            index = llama.llama_batch_ext_add_token(self._batch, 0, anchor if i == 0 else self.mask)
            self._set_pos(index, position + i)
            # Every row: the dflash graph computes them all and skips none for the flags, so
            # the k-th flagged token would get the graph's k-th row (the anchor's, for k = 0).
            llama.llama_batch_ext_set_output_logits(self._batch, index, True)
        self._process()
        for i in range(n):
            row = llama.llama_get_logits_ith(self._ctx, first + i)  # by its index in the batch
            self._logits[i] = np.ctypeslib.as_array(row, (self.n_vocab,))
        self.truncate(position)  # the block's own entries: the next pass's are the target's
        return self._logits[:n]


def open_block(path: str | os.PathLike[str], target: Model) -> tuple[NativeBlock, HiddenRows]:
    """Load a DFlash or DSpark draft for `target` and make the target keep the layer inputs
    it reads (its first sequence's rows are returned; `twin` gives another sequence a context
    of its own); a draft made for another target is refused in one line."""
    path = Path(path)
    check_gguf_header(path)
    info = read_gguf_info(path)
    if info.architecture != "dflash":
        raise SpecrunError(
            f"{path.name} is not a DFlash or DSpark draft (its architecture is {info.architecture})"
        )
    tensors = tensor_table(path)
    names = {name for name, _, _ in tensors}
    if "selector_hidden.weight" in names:
        raise SpecrunError(
            f"{path.name} is a DFlash2 draft (a candidate selector): specrun drafts with DFlash "
            "and DSpark drafts only"
        )
    clear_log()
    params = load_params(
        target.gpu_layers, build_info(), allow_amx=amx_allowed(), tensors=lambda: tensors
    )
    model = llama.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise_pending()
        raise load_failure(f"cannot load {path}")
    try:
        layers = ext.target_layer_ids(model)
        hidden = llama.llama_model_n_embd(model)
        if hidden != target.n_embd:
            raise SpecrunError(
                f"{path.name} was made for a target of hidden size {hidden}; "
                f"{target.name} has {target.n_embd}"
            )
        if not target.has_layers(layers):
            raise SpecrunError(
                f"{path.name} reads target layers {list(layers)}; {target.name} has "
                f"{target.n_layer} (0 to {target.n_layer - 1})"
            )
        check_recorded_target(path, model, target, "dflash")
        block_size = int(metadata(model, "dflash.block_size") or DEFAULT_BLOCK_SIZE)
        dspark = "markov_w1.weight" in names
        anchor_first = dspark and metadata(model, "dflash.sample_from_anchor") != "false"
        if block_size < (1 if anchor_first else 2):
            raise SpecrunError(f"{path.name} has a block of {block_size}: it drafts nothing")
        ctx_params = head_context_params(target)
        ctx_params.n_ctx = target.n_ctx + block_size  # the block goes past the last position
        ctx_params.n_batch = ctx_params.n_ubatch = max(target.n_batch, block_size)
        ctx_params.ctx_other = target.context  # its token embeddings and output, if it has none
        block = NativeBlock(
            "dspark" if dspark else "dflash",
            path,
            model,
            ctx_params,
            block_size=block_size,
            anchor_first=anchor_first,
            causal=metadata(model, "dflash.attention.causal") == "true",
            owns_model=True,
        )
    except BaseException:
        llama.llama_model_free(model)
        raise
    try:
        if block.mask < 0:
            raise SpecrunError(f"{path.name} names no mask token: it is not a usable block draft")
        check_compatible(target, block)
    except BaseException:
        block.close()
        raise
    return block, target.keep_hidden(layers)[0]
