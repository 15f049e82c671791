"""What the round loop needs of a model: the protocol `specrun.llama.model.Model` keeps.

The loop, the drafts and the tests of their math run against anything that keeps it, a
GGUF over llama.cpp or a fake with fixed logits (bench/loop_ceiling.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, overload

import numpy as np

from specrun.core.sampling import Rows

# Whether a model's output device chooses each row's candidates (llama.cpp's backend
# sampling), so that only they, not the whole vocabulary's logits, reach the loop: "auto"
# where the output layer is on a local GPU but a Vulkan one (DESIGN.md, Vulkan).
BackendSampling = Literal["auto", "on", "off"]


class LanguageModel(Protocol):
    """A model with one KV cache, which holds `tokens`."""

    name: str
    n_vocab: int
    n_ctx: int  # the context loaded: prompt and answer together
    n_ctx_train: int  # the context the model was trained for
    first_of_shape: bool  # whether the last `logits` call decoded a batch shape first
    # Other sequences' rows decoded with the last `logits` call's, and how many sequences they
    # were for: 0 but where slots share a context (specrun.llama.slots).
    shared_rows: int
    shared_with: int

    @property
    def n_evaluated(self) -> int:
        """Positions decoded so far."""
        ...

    @property
    def tokens(self) -> Sequence[int]: ...

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
        """Make the cache hold `seq`; the logits of its last `last` positions, one row each
        (with `view`, rows valid until the next call). With `top`, a model whose device
        samples may return each row's `top` best candidates instead (CandidateRows)."""
        ...

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends a generation."""
        ...

    def piece(self, token: int) -> bytes:
        """The bytes `token` stands for in text."""
        ...
