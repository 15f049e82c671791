"""A draft's own llama.cpp context on its weights: what a head and a block draft share.

Both decode through `llama_process` with an extended batch (`llama_batch_ext`), whose entries
carry a token id or an embedding row; both keep one sequence in their cache, give each other
slot of a parallel engine a twin (another context on the same weights), and close their twins
before the weights they use.
"""

from __future__ import annotations

import ctypes

import llama_cpp as llama
import numpy as np

from specrun.errors import SpecrunError
from specrun.llama.diagnose import load_failure
from specrun.llama.vocab import Vocabulary
from specrun.system.interrupts import raise_pending


class DraftContext(Vocabulary):
    """A context on a draft's weights (`model`, freed with it where `owns_model`) and its batch."""

    what = "draft"  # how its errors name it

    def __init__(
        self, name: str, model: int, ctx_params: llama.llama_context_params, *, owns_model: bool
    ) -> None:
        self.name = name
        self._twins: list[DraftContext] = []  # closed before this one, whose model they use
        self._model = model if owns_model else None
        self._ctx = llama.llama_init_from_model(model, ctx_params)
        if not self._ctx:
            self._model = None  # the caller that loaded it frees it
            self.close()
            raise load_failure(f"cannot create a context for the {self.what} {name}")
        self._bind_vocabulary(llama.llama_model_get_vocab(model))
        self.n_ubatch = llama.llama_n_ubatch(self._ctx)
        self._memory = llama.llama_get_memory(self._ctx)
        self._batch = llama.llama_batch_ext_init(self._ctx)

    def _twinned(self, twin: DraftContext) -> None:
        """Keep a twin (another context on these weights) to close before them."""
        self._twins.append(twin)

    def truncate(self, position: int) -> None:
        llama.llama_memory_seq_rm(self._memory, 0, position, -1)

    def _set_pos(self, index: int, position: int) -> None:
        # Up to four coordinates (M-RoPE); a text position is the first.
        llama.llama_batch_ext_set_pos(self._batch, index, (ctypes.c_int32 * 4)(position))

    def _process(self, kind: int = llama.LLAMA_PROCESS_TYPE_DECODE) -> None:
        status = llama.llama_process(self._ctx, kind, self._batch)
        if status != 0:
            raise_pending()
            raise SpecrunError(f"the {self.what} {self.name} failed to decode (status {status})")

    def close(self) -> None:
        twins, self._twins = getattr(self, "_twins", []), []
        for twin in twins:
            twin.close()
        handles = getattr(self, "_batch", None), getattr(self, "_ctx", None), self._model
        self._batch = self._ctx = self._model = None
        batch, ctx, model = handles
        if batch:
            llama.llama_batch_ext_free(batch)
        if ctx:
            llama.llama_synchronize(ctx)  # as Model.close
            llama.llama_free(ctx)
        if model:
            llama.llama_model_free(model)

    def __del__(self) -> None:
        self.close()


def embedding_row(array: np.ndarray, i: int) -> llama.llama_embd:
    """Row i of a C-contiguous float32 array as llama.cpp's embedding view (not a copy)."""
    pointer = array[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    return llama.llama_embd(pointer, 1, array.shape[1])
