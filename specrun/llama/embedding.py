"""An embedding model over llama.cpp: a GGUF loaded with a context of its own whose hidden
states are pooled per sequence (llama.cpp's `embeddings` on, and the pooling the model
declares), apart from any generation engine, whose contexts keep logits. Inputs are token
sequences, several decoded at once (a sequence id each); each vector comes back at unit length
(L2), as OpenAI's embeddings and llama-server's /v1/embeddings do."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import llama_cpp as llama
import numpy as np

from specrun.errors import SpecrunError
from specrun.llama.devices import amx_allowed, build_info, gpu_offload_supported
from specrun.llama.diagnose import load_failure
from specrun.llama.gguf import check_gguf_header, tensors_and_metadata
from specrun.llama.model import DEFAULT_CTX
from specrun.llama.native import clear_log, set_verbose
from specrun.llama.params import load_params
from specrun.llama.vocab import Vocabulary
from specrun.system.cpus import physical_cores
from specrun.system.interrupts import raise_pending

Pooling = Literal["mean", "cls", "last"]  # those that make one vector of an input
# llama.cpp's `llama_pooling_type` of each, the number a GGUF's `{arch}.pooling_type` holds.
POOLINGS: dict[int, Pooling] = {
    llama.LLAMA_POOLING_TYPE_MEAN: "mean",
    llama.LLAMA_POOLING_TYPE_CLS: "cls",
    llama.LLAMA_POOLING_TYPE_LAST: "last",
}
POOLING_CODES = {name: code for code, name in POOLINGS.items()}
SEQUENCES = 32  # inputs one decode takes at most (llama.cpp allows 256)


class CannotEmbed(SpecrunError):
    """A model whose GGUF declares no pooling that makes one vector of an input."""


def declared_pooling(path: Path) -> Pooling:
    """The pooling `path`'s GGUF declares (`{arch}.pooling_type`, read from its header without
    loading it), or CannotEmbed: none (a causal LM: a vector per token, which llama-server's
    /v1/embeddings refuses too), or rank (a reranker: a score, not a vector)."""
    metadata = tensors_and_metadata(path)[1]
    architecture = metadata.get("general.architecture")
    code = metadata.get(f"{architecture}.pooling_type", llama.LLAMA_POOLING_TYPE_NONE)
    if code in POOLINGS:
        return POOLINGS[code]
    if code == llama.LLAMA_POOLING_TYPE_NONE:
        raise CannotEmbed(
            f"{path.name} declares no pooling (a {architecture} model gives a vector per token, "
            "not one per input): it is no embedding model"
        )
    what = "a reranker: it scores pairs" if code == llama.LLAMA_POOLING_TYPE_RANK else None
    raise CannotEmbed(
        f"{path.name} is {what or f'of pooling type {code}, unknown to llama.cpp'}, "
        "and makes no embedding vectors"
    )


class Embedder(Vocabulary):
    """A GGUF loaded for embeddings: `embed` turns token sequences into unit vectors, one
    thread at a time (the context is not shared); `close` waits for a running `embed`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_ctx: int | None = DEFAULT_CTX,
        gpu_layers: int | None = None,
        threads: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.path = Path(path)
        self.name = self.path.name
        check_gguf_header(self.path)
        self.pooling = declared_pooling(self.path)  # before the weights load: refused fast
        set_verbose(verbose)
        clear_log()
        if gpu_layers is None:  # all layers where llama.cpp can offload, as `Model`
            gpu_layers = 999 if gpu_offload_supported() else 0
        self._lock = threading.Lock()
        self._ctx = self._batch = None
        params = load_params(gpu_layers, build_info(), allow_amx=amx_allowed())
        self._model = llama.llama_model_load_from_file(os.fsencode(self.path), params)
        if not self._model:
            raise_pending()
            raise load_failure(f"cannot load {self.path}")
        self._bind_vocabulary(llama.llama_model_get_vocab(self._model))
        self.n_embd: int = llama.llama_model_n_embd_out(self._model)
        n_ctx_train = llama.llama_model_n_ctx_train(self._model)
        n_ctx = min(n_ctx or n_ctx_train, n_ctx_train)
        ctx_params = llama.llama_context_default_params()
        # A whole batch in one ubatch: a non-causal model (BERT) attends over all of an input.
        ctx_params.n_ctx = ctx_params.n_batch = ctx_params.n_ubatch = n_ctx
        ctx_params.n_seq_max = SEQUENCES
        ctx_params.kv_unified = True  # the inputs of a batch share the cells, as they come
        ctx_params.embeddings = True
        ctx_params.pooling_type = POOLING_CODES[self.pooling]
        ctx_params.n_threads = ctx_params.n_threads_batch = threads or physical_cores()
        ctx_params.no_perf = True
        self._ctx = llama.llama_init_from_model(self._model, ctx_params)
        if not self._ctx:
            self.close()
            raise load_failure(f"cannot create an embedding context for {self.path}")
        self.n_ctx: int = llama.llama_n_ctx(self._ctx)  # tokens one input may have
        self._memory = llama.llama_get_memory(self._ctx)  # none for an encoder (BERT)
        self._batch = llama.llama_batch_init(self.n_ctx, 0, 1)

    def embed(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """Each input's pooled vector at unit length, as rows [len(inputs), n_embd]; the inputs
        decoded together, as many a decode as fit (SEQUENCES, n_ctx tokens). Each input has
        1..n_ctx tokens of the vocabulary (the caller checks, and says which does not)."""
        vectors = np.empty((len(inputs), self.n_embd), dtype=np.float32)
        with self._lock:
            if self._ctx is None:
                raise SpecrunError(f"{self.name} was closed")
            for first, count in self._batches([len(tokens) for tokens in inputs]):
                vectors[first : first + count] = self._decode(inputs[first : first + count])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1)  # llama.cpp's: a zero vector stays zero

    def _batches(self, lengths: list[int]) -> Iterator[tuple[int, int]]:
        """Runs of consecutive inputs that fit one decode: (first, count)."""
        first, tokens = 0, 0
        for index, length in enumerate(lengths):
            if index > first and (index - first == SEQUENCES or tokens + length > self.n_ctx):
                yield first, index - first
                first, tokens = index, 0
            tokens += length
        if lengths:
            yield first, len(lengths) - first

    def _decode(self, inputs: Sequence[Sequence[int]]) -> np.ndarray:
        """One decode of `inputs`, sequence i each, every position an output (pooling reads
        them all); each sequence's pooled vector."""
        batch = self._batch
        assert batch is not None
        llama.llama_memory_clear(self._memory, True)  # a no-op for an encoder, which keeps none
        n = 0
        for seq_id, tokens in enumerate(inputs):
            for position, token in enumerate(tokens):
                batch.token[n], batch.pos[n], batch.logits[n] = token, position, True
                batch.n_seq_id[n], batch.seq_id[n][0] = 1, seq_id
                n += 1
        batch.n_tokens = n
        status = llama.llama_decode(self._ctx, batch)
        raise_pending()
        if status != 0:
            raise SpecrunError(f"{self.name}: llama.cpp could not decode the inputs ({status})")
        rows = np.empty((len(inputs), self.n_embd), dtype=np.float32)
        for seq_id in range(len(inputs)):
            pooled = llama.llama_get_embeddings_seq(self._ctx, seq_id)
            if not pooled:
                raise SpecrunError(f"{self.name}: llama.cpp pooled no vector for an input")
            rows[seq_id] = np.ctypeslib.as_array(pooled, shape=(self.n_embd,))
        return rows

    def close(self) -> None:
        """Free the native objects once, after any `embed` running in another thread."""
        with self._lock:
            batch, ctx, model = self._batch, self._ctx, getattr(self, "_model", None)
            self._batch = self._ctx = self._model = None
        if batch is not None:
            llama.llama_batch_free(batch)
        if ctx:
            llama.llama_synchronize(ctx)
            llama.llama_free(ctx)
        if model:
            llama.llama_model_free(model)

    def __del__(self) -> None:
        if hasattr(self, "_lock"):
            self.close()
