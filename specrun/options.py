"""The engine's option objects, and the one place each default lives.

The defaults come from where each concept lives (`DEFAULT_CTX` from the runtime,
`GAMMA_MAX` from the γ policies). Each front end builds these once (the CLI in
`specrun.cli.options`) and hands them to `Engine.load`, which takes them explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from specrun.core.lookup import LookupDraft
from specrun.core.model import BackendSampling
from specrun.llama.tuning import CacheTypes, Tuning


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int | None = None  # None: llama.model.DEFAULT_CTX
    gpu_layers: int | None = None  # None: as many as fit (see `fit`)
    draft_gpu_layers: int | None = None
    fit: bool = True  # place layers by free GPU memory; False: every layer llama.cpp can offload
    threads: int | None = None  # None: one per physical core
    verbose: bool = False  # llama.cpp's own log on stderr
    # Greedy output independent of γ and of the run: the target decodes so that a
    # position's logits do not depend on its batch (llama.invariance.Invariance).
    reproducible: bool = False
    # HOST:PORT of each RPC server (`specrun rpc-server`) whose devices take target layers.
    rpc: tuple[str, ...] = ()
    # Each row's candidates chosen on the output layer's device, so that only they reach
    # the loop ("auto": where that device is a local GPU but a Vulkan one, DESIGN.md; on the
    # CPU its top-k costs more than specrun's own search over the row).
    backend_sampling: BackendSampling = "auto"
    # Generations at once (slots): each its own sequence of `n_ctx` positions, their rounds
    # decoded in one batch; `Engine.stream` may then be called from that many threads.
    parallel: int = 1
    # Prompt lookup's and suffix drafts as token trees of up to this many branches, verified
    # in one pass (core.trees); 1: chains. One slot only, and not under `reproducible`.
    tree_branches: int = 1
    # The memory and speed knobs (KV cache types, flash attention, mmap/mlock, batch threads,
    # RoPE scaling), the target's and the draft model's alike but for `draft_cache`.
    tuning: Tuning = Tuning()
    draft_cache: CacheTypes | None = None  # the draft model's KV cache types; None: the target's

    @property
    def draft_tuning(self) -> Tuning:
        """A draft model's knobs: the target's, with its own cache types where given."""
        if self.draft_cache is None:
            return self.tuning
        return replace(self.tuning, cache=self.draft_cache)


@dataclass(frozen=True)
class LookupOptions:
    """Prompt lookup's n-gram bounds; `LookupDraft` checks them."""

    ngram: int = 3  # longest n-gram matched
    min_ngram: int = 2  # shortest n-gram matched
    max_tokens: int = 10  # longest continuation proposed

    def __post_init__(self) -> None:
        self.draft()  # the bounds are checked where they are used, and reported now

    def draft(self) -> LookupDraft:
        return LookupDraft(self.ngram, self.min_ngram, self.max_tokens)


@dataclass(frozen=True)
class DraftOptions:
    """How drafts are made and how long they get."""

    gamma: str = "auto"  # "auto", "heuristic" or a number (0: plain decoding)
    # None: GAMMA_MAX, or a block draft's block where that is longer (one pass drafts it
    # whole, and auto prices each position of it: `Engine.load`).
    gamma_max: int | None = None
    p_min: float = 0.0  # stop drafting when the draft's confidence falls below this
    lookup: LookupOptions = LookupOptions()  # prompt lookup, alone or in the hybrid
    hybrid: bool = False  # with a draft model: prompt lookup first, the model where nothing matches
    # Suffix drafts' earlier answers kept in this file between runs (specrun.suffix_file).
    suffix_file: Path | None = None


class PromptLookup:
    """The draft that is no model: prompt lookup alone. A sentinel no file name can collide with."""

    spec = "lookup"  # as --draft names it

    def __repr__(self) -> str:
        return "PROMPT_LOOKUP"


PROMPT_LOOKUP = PromptLookup()


class SuffixDecoding:
    """Suffix drafts: the request's own text and this process's earlier answers
    (specrun.core.suffix). A sentinel, as `PROMPT_LOOKUP`."""

    spec = "suffix"  # as --draft names it

    def __repr__(self) -> str:
        return "SUFFIX"


SUFFIX = SuffixDecoding()


@dataclass(frozen=True)
class Eagle3Head:
    """An EAGLE-3 head: one decoder layer fed with three of the target's hidden states."""

    path: Path

    @property
    def spec(self) -> str:
        return f"eagle3:{self.path}"


class MtpLayers:
    """The draft that is the target's own MTP layers: a sentinel, as `PROMPT_LOOKUP`."""

    spec = "mtp"

    def __repr__(self) -> str:
        return "MTP_LAYERS"


MTP_LAYERS = MtpLayers()


@dataclass(frozen=True)
class BlockDraftFile:
    """A block draft (DFlash or DSpark: which, the file says) that drafts a whole block in one
    pass, fed by the target's hidden states."""

    path: Path

    @property
    def spec(self) -> str:
        return f"dflash:{self.path}"


# What `Engine.load` takes for a draft besides a draft model's GGUF, and with it.
DraftChoice = PromptLookup | SuffixDecoding | Eagle3Head | MtpLayers | BlockDraftFile
DraftSpec = str | Path | DraftChoice
