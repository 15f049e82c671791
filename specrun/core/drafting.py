"""Draft sources: where the γ proposed tokens of a round come from.

A draft model proposes tokens with the distribution q it drew them from; a
deterministic source (prompt lookup) proposes tokens with no distribution, which
verification treats as a point mass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from specrun.core.model import LanguageModel
from specrun.core.sampling import Distribution, SamplingParams, pick
from specrun.core.sequence import Tokens

# Where proposals come from: a draft model, prompt lookup, lookup then a model or head,
# an EAGLE-3 head, or the target's own MTP layers.
DraftKind = Literal["model", "lookup", "hybrid", "eagle3", "mtp"]


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    probs: list[Distribution | None] = field(default_factory=list)  # q_i, or None for a point mass
    # Time spent taking in tokens committed while the source did not draft (plain rounds,
    # or a prompt not prefilled): a cost of having paused, not of drafting.
    catch_up_seconds: float = 0.0


class DraftSource(Protocol):
    name: str
    kind: DraftKind

    def prefill(self, ctx: Sequence[int]) -> None:
        """Take in the prompt before the first round (may do nothing; `propose` catches up)."""

    def propose(
        self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator
    ) -> Proposal:
        """Propose up to n tokens to follow ctx."""


class ModelDraft:
    """A small model drafting with the target's sampling transform.

    Stops a round early when its own confidence in the next token (the probability
    of its top choice) falls below `p_min`, as llama.cpp's speculative example does.
    """

    kind: DraftKind = "model"

    def __init__(self, model: LanguageModel, target_vocab: int, p_min: float = 0.0) -> None:
        self.model = model
        self.name = model.name
        self.target_vocab = target_vocab
        self.p_min = p_min

    def prefill(self, ctx: Sequence[int]) -> None:
        self.model.logits(ctx, 0)

    def propose(
        self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator
    ) -> Proposal:
        proposal = Proposal()
        ctx = ctx if isinstance(ctx, Tokens) else Tokens(ctx)
        # After a round that drafted, the draft lacks at most the target's token and the
        # last accepted draft; more than that, it paused: catch up in one batch, timed apart.
        if len(ctx) - len(self.model.tokens) > 2:
            start = time.perf_counter()
            self.model.logits(ctx.but_last(), 0)
            proposal.catch_up_seconds = time.perf_counter() - start
        for _ in range(n):
            # Vocabularies may differ by padding (<= 128 ids); ids beyond the target's are never
            # proposed.
            logits = self.model.logits(ctx.then(proposal.tokens), 1, view=True)[
                0, : self.target_vocab
            ]
            if self.p_min > 0 and top_probability(logits) < self.p_min:
                break
            token, q = pick(logits, params, rng)
            proposal.tokens.append(token)
            proposal.probs.append(q)
        return proposal


def top_probability(logits: np.ndarray) -> float:
    """The top token's probability at temperature 1, 1 / sum(exp(x - max)), with no
    probability vector: one float32 pass, summed in float64."""
    shifted = logits - logits.max()
    return 1.0 / float(np.exp(shifted, out=shifted).sum(dtype=np.float64))


class HybridDraft:
    """Prompt lookup first, the draft model (or head) when the text offers no match."""

    kind: DraftKind = "hybrid"

    def __init__(self, lookup: DraftSource, model: DraftSource) -> None:
        self.lookup = lookup
        self.model = model
        self.name = f"lookup+{model.name}"

    def prefill(self, ctx: Sequence[int]) -> None:
        self.lookup.prefill(ctx)
        self.model.prefill(ctx)

    def propose(
        self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator
    ) -> Proposal:
        proposal = self.lookup.propose(ctx, n, params, rng)
        return proposal if proposal.tokens else self.model.propose(ctx, n, params, rng)
