"""Heads over llama.cpp: an EAGLE-3 GGUF, or the MTP layers inside the target's own file.

Both decode pairs (token, hidden state) through `llama_process` with an extended batch
(`llama_batch_ext`), whose entries carry a token id and an embedding row. An EAGLE-3 head
first projects the target's three layer inputs to its own width (its encoder graph, the
`fc` layer) and may borrow the target's token embeddings and output layer (its context
names the target's as `ctx_other`); an MTP head is a second context of type MTP on the
target's model, whose graph runs only the nextn layers. Each reports the hidden state it
feeds itself next through the `nextn` embeddings, as common/speculative.cpp reads them.

Which target a head can serve is checked before any generation: `open_eagle3` and
`open_mtp` refuse a mismatch in one line.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
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
from specrun.llama.model import Model
from specrun.llama.native import clear_log
from specrun.llama.params import load_params
from specrun.system.interrupts import raise_pending

# The architectures whose llama.cpp graph runs MTP layers (LLM_GRAPH_TYPE_DECODER_MTP).
MTP_ARCHITECTURES = frozenset(
    {
        "bailingmoe3",
        "cohere2moe",
        "deepseek2",
        "deepseek32",
        "deepseek4",
        "glm4moe",
        "glm5-next",
        "glm-dsa",
        "hy_v3",
        "mimo2",
        "nemotron_h_moe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "step35",
    }
)

# What a draft records of its target under `specrun.KIND.target.` (a head trained by
# `specrun heads train`, a block draft converted by the catalog): each key's suffix, and the
# target's own metadata key it must equal (None: its layer count). Checked here.
TRAINED_FOR_KEYS = (
    ("name", "general.name"),
    ("architecture", "general.architecture"),
    ("block_count", None),
)


class NativeHead(DraftContext):
    """A head's context and batch; `encode` projects the target's rows first (EAGLE-3)."""

    what = "head"

    def __init__(
        self,
        kind: Literal["eagle3", "mtp"],
        file: Path,
        model: int,
        ctx_params: llama.llama_context_params,
        *,
        offset: int,
        encode: bool,
        owns_model: bool,
    ) -> None:
        self.kind = kind
        self.path = file if kind == "eagle3" else None  # MTP layers are in the target's file
        self.offset = offset
        self._encode = encode
        self._made = (kind, file, model, ctx_params)  # what a twin is made of
        super().__init__(f"{kind}:{file.name}", model, ctx_params, owns_model=owns_model)
        ext.function("llama_set_embeddings_nextn")(self._ctx, True, True)
        self.n_embd = llama.llama_model_n_embd(model)
        self._state = np.empty(self.n_embd, np.float32)  # the last output's, a copy

    def twin(self) -> NativeHead:
        """Another context of this head on the same weights, for another sequence of the
        target (a slot of a parallel engine): its own cache, its own state."""
        kind, file, model, ctx_params = self._made
        twin = NativeHead(
            kind, file, model, ctx_params, offset=self.offset, encode=self._encode, owns_model=False
        )
        self._twinned(twin)
        return twin

    def feed(
        self, position: int, tokens: Sequence[int], states: np.ndarray, *, own: bool, output: bool
    ) -> tuple[np.ndarray, np.ndarray] | None:
        if self._encode and not own:
            states = self._project(states)
        states = np.ascontiguousarray(states, dtype=np.float32)
        # The pair whose output is read goes in a pass of its own: the EAGLE-3 decoder's graph
        # selects no output rows, so in a wider pass llama.cpp hands out its first row's.
        last = len(tokens) - 1 if output else len(tokens)
        bounds = [*range(0, last, self.n_ubatch), last, len(tokens)]
        for start, end in zip(bounds, bounds[1:]):
            if start == end:
                continue
            llama.llama_batch_ext_clear(self._batch)
            for i in range(start, end):
                index = llama.llama_batch_ext_add_token(self._batch, 0, tokens[i])
                self._set_pos(index, position + i)
                llama.llama_batch_ext_set_embd_token(self._batch, index, embedding_row(states, i))
            if output and end == len(tokens):
                llama.llama_batch_ext_set_output_logits(self._batch, 0, True)
            self._process()
        if not output:
            return None
        logits = np.ctypeslib.as_array(llama.llama_get_logits_ith(self._ctx, -1), (self.n_vocab,))
        state = ext.function("llama_get_embeddings_nextn_ith")(self._ctx, -1)
        if not state:
            raise SpecrunError(f"the head {self.name} returned no hidden state")
        self._state[:] = np.ctypeslib.as_array(state, (self.n_embd,))
        return logits, self._state

    def _project(self, features: np.ndarray) -> np.ndarray:
        """EAGLE-3's encoder: the target's fused layer inputs to the head's width."""
        features = np.ascontiguousarray(features, dtype=np.float32)
        out = np.empty((len(features), self.n_embd), np.float32)
        # The encoder reads no positions, but the batch must continue the cache's.
        after = llama.llama_memory_seq_pos_max(self._memory, 0) + 1
        for start in range(0, len(features), self.n_ubatch):
            end = min(start + self.n_ubatch, len(features))
            llama.llama_batch_ext_clear(self._batch)
            for i in range(start, end):
                index = llama.llama_batch_ext_add_embd(self._batch, 0, embedding_row(features, i))
                self._set_pos(index, after + i - start)
                llama.llama_batch_ext_set_output_logits(self._batch, index, True)
            self._process(llama.LLAMA_PROCESS_TYPE_ENCODE)
            projected = ext.function("llama_get_embeddings_nextn")(self._ctx)
            out[start:end] = np.ctypeslib.as_array(projected, (end - start, self.n_embd))
        return out


def head_context_params(target: Model) -> llama.llama_context_params:
    params: llama.llama_context_params = llama.llama_context_default_params()
    params.n_ctx = target.n_ctx + 1  # an MTP pair sits one position after its target's
    params.n_batch = params.n_ubatch = target.n_batch
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = target.threads
    params.no_perf = True
    return params


def open_eagle3(path: str | os.PathLike[str], target: Model) -> tuple[NativeHead, HiddenRows]:
    """Load an EAGLE-3 head for `target` and make the target keep the layer inputs it reads
    (its first sequence's rows are returned; `twin` gives another sequence a head of its own);
    a head made for another target is refused in one line."""
    path = Path(path)
    check_gguf_header(path)
    info = read_gguf_info(path)
    if info.architecture != "eagle3":
        raise SpecrunError(
            f"{path.name} is not an EAGLE-3 head (its architecture is {info.architecture})"
        )
    clear_log()
    params = load_params(
        target.gpu_layers, build_info(), allow_amx=amx_allowed(), tensors=lambda: tensor_table(path)
    )
    model = llama.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise_pending()
        raise load_failure(f"cannot load {path}")
    try:
        layers = ext.target_layer_ids(model)
        hidden = metadata_int(model, "eagle3.target_hidden_size")
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
        check_recorded_target(path, model, target, "eagle3")
        ctx_params = head_context_params(target)
        ctx_params.ctx_other = target.context  # its token embeddings and output, if it has none
        head = NativeHead("eagle3", path, model, ctx_params, offset=0, encode=True, owns_model=True)
    except BaseException:
        llama.llama_model_free(model)
        raise
    try:
        check_compatible(target, head)
    except BaseException:
        head.close()
        raise
    return head, target.keep_hidden(layers)[0]


def open_mtp(target: Model) -> tuple[NativeHead, HiddenRows]:
    """The MTP layers of `target` (loaded with `load_mtp`) as a head; a target without
    them is refused in one line."""
    if target.n_layer_nextn == 0 or target.architecture not in MTP_ARCHITECTURES:
        raise SpecrunError(
            f"{target.name} has no MTP layers llama.cpp can draft with (architecture "
            f"{target.architecture}, {target.n_layer_nextn} nextn layers); MTP drafting needs "
            "a model converted with them, such as GLM-4.5, Qwen3.5 or DeepSeek-V3"
        )
    ctx_params = head_context_params(target)
    ctx_params.ctx_type = llama.LLAMA_CONTEXT_TYPE_MTP
    head = NativeHead(
        "mtp",
        target.path,
        target.model,
        ctx_params,
        offset=1,
        encode=False,
        owns_model=False,
    )
    return head, target.keep_hidden()[0]


def check_recorded_target(path: Path, draft: int, target: Model, kind: str) -> None:
    """A draft that names the target it was made for serves only that target."""
    recorded, actual = [], []
    for key, target_key in TRAINED_FOR_KEYS:
        value = metadata(draft, f"specrun.{kind}.target.{key}")
        if value is None:
            return  # a draft made elsewhere names no target
        recorded.append(value)
        actual.append(
            (metadata(target.model, target_key) or "") if target_key else str(target.n_layer)
        )
    if recorded != actual:
        name, arch, layers = recorded
        remedy = (
            "train one for it with `specrun heads train`"
            if kind == "eagle3"
            else "use the block draft made for it"
        )
        raise SpecrunError(
            f"{path.name} was made for {name} ({arch}, {layers} layers); {target.name} is "
            f"{actual[0]} ({actual[1]}, {actual[2]} layers): {remedy}"
        )


def metadata(model: int, key: str) -> str | None:
    buffer = ctypes.create_string_buffer(256)
    if llama.llama_model_meta_val_str(model, key.encode(), buffer, len(buffer)) < 0:
        return None
    return buffer.value.decode("utf-8", "replace")


def metadata_int(model: int, key: str) -> int | None:
    value = metadata(model, key)
    return None if value is None else int(value)
