"""Backend samplers: llama.cpp choosing each output row's best candidates on the device that
computed it (a top-k chain per sequence, `llama_set_sampler`), so that only they leave it
(DESIGN.md, Backend sampling)."""

from __future__ import annotations

from collections.abc import Collection

import llama_cpp as llama

from specrun.core.model import BackendSampling
from specrun.errors import SpecrunError
from specrun.llama.batch import Batch, Run


class BackendSamplers:
    """The top-k chains attached to a context's sequences, by sequence id: (width, chain).
    A chain lives until it is replaced or detached: the context only refers to it."""

    def __init__(self, context: llama.llama_context_p, name: str) -> None:
        self.context = context
        self.name = name
        self._chains: dict[int, tuple[int, llama.llama_sampler_p]] = {}

    @property
    def attached(self) -> bool:
        """Whether any sequence has a chain."""
        return bool(self._chains)

    def attach(self, seq_id: int, width: int | None) -> None:
        """From the next decode on, have llama.cpp choose each of the sequence's rows' `width`
        best tokens on the output layer's device; None: whole rows again."""
        previous = self._chains.get(seq_id)
        if (previous[0] if previous else None) == width:
            return
        chain = None
        if width is not None:
            chain = llama.llama_sampler_chain_init(llama.llama_sampler_chain_default_params())
            llama.llama_sampler_chain_add(chain, llama.llama_sampler_init_top_k(width))
        attached = llama.llama_set_sampler(self.context, seq_id, chain)  # None detaches
        if chain is not None and not attached:
            llama.llama_sampler_free(chain)
            raise SpecrunError(f"{self.name}: llama.cpp refused a top-{width} backend sampler")
        if width is not None and chain is not None:
            self._chains[seq_id] = (width, chain)
        else:
            self._chains.pop(seq_id, None)
        if previous is not None:
            llama.llama_sampler_free(previous[1])

    def keep_only(self, seq_ids: Collection[int]) -> None:
        """Detach the chains of the sequences not in `seq_ids`. llama.cpp runs the sampler of
        a sequence without rows in a decode on the batch's first row, and that run can
        overwrite the candidates of the sequence whose row it is."""
        for seq_id in [s for s in self._chains if s not in seq_ids]:
            self.attach(seq_id, None)

    def probe(self, batch: Batch) -> bool:
        """Whether this build's backend chooses candidates on the output layer's device: one
        token decoded with a top-2 sampler attached (llama.cpp accepts any chain and runs
        what its backend cannot on the CPU, whole rows and all). The caller clears the cache
        the probe wrote."""
        try:
            self.attach(0, 2)
            batch.fill([Run(0, [0], 0, 0)])
            decoded = batch._decode() == 0
            return decoded and llama.llama_get_sampled_candidates_count_ith(self.context, -1) == 2
        except SpecrunError:  # refused outright (llama.cpp's tensor-split mode)
            return False
        finally:
            self.attach(0, None)

    def close(self) -> None:
        """Free the chains: after the context that refers to them."""
        chains, self._chains = self._chains, {}
        for _, chain in chains.values():
            llama.llama_sampler_free(chain)


def backend_sampling_wanted(
    asked: BackendSampling, *, offloaded: bool, vulkan: bool, remote: bool
) -> bool:
    """Whether to ask for candidates from the device, as `backend_sampling` says. The output
    layer is on the last offloaded device whenever any layer is. llama.cpp's backend samplers
    crash a Vulkan device (DESIGN.md, Vulkan): `on` is refused there. An RPC server's backend
    cannot be told from here: `auto` asks for them on neither."""
    if asked == "on" and vulkan:
        raise SpecrunError(
            "llama.cpp's backend samplers crash on Vulkan devices (DESIGN.md, Vulkan); "
            "use `backend_sampling` off or auto"
        )
    return asked == "on" or (asked == "auto" and offloaded and not vulkan and not remote)
