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

from specrun.core.costs import RoundLike
from specrun.core.gamma import GAMMA_MAX, AdaptiveGamma, GammaPolicy, PlainSamples, parse_policy
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


Role = Literal["lookup", "model"]  # the hybrid's two sources


class SourceChoice:
    """auto for the hybrid: an adaptive policy per source, each learning its own α (on the
    rounds its source drafted) and its own cost per token, and the loop's policy over both
    (`next_gamma` the longer of their γ). A round is evidence for the source that drafted
    it; a round that no source drafted, for both; the other source only counts it as gone
    by (`AdaptiveGamma.pass_round`)."""

    name = "auto"

    def __init__(self, gamma_max: int) -> None:
        self.policies: dict[Role, AdaptiveGamma] = {
            "lookup": AdaptiveGamma(gamma_max),
            "model": AdaptiveGamma(gamma_max),
        }
        self.asked: dict[Role, int] = {}  # this round's γ of each source asked
        self.drafter: Role | None = None  # this round's

    def next_gamma(self) -> int:
        return max(policy.next_gamma() for policy in self.policies.values())

    def gamma(self, role: Role, n: int) -> int:
        self.asked[role] = gamma = min(self.policies[role].next_gamma(), n)
        return gamma

    def prefers_lookup(self, drafted: int, model_gamma: int) -> bool:
        """Whether lookup's `drafted` tokens promise a better rate than the model at its γ.
        Where the model would not draft, or lookup's policy probes, lookup's own policy has
        chosen (a probe that a comparison could veto would never bring evidence); a rate not
        yet measured loses to none: lookup costs next to nothing to try."""
        lookup = self.policies["lookup"]
        if model_gamma == 0 or lookup.gamma == 0:
            return True
        lookup_rate = lookup.rates().get(drafted)
        model_rate = self.policies["model"].rates().get(model_gamma)
        return lookup_rate is None or model_rate is None or lookup_rate >= model_rate

    def observe(self, event: RoundLike) -> None:
        drafter, asked = self.drafter, self.asked
        self.drafter, self.asked = None, {}
        for role, policy in self.policies.items():
            if drafter is None or role == drafter:
                # As the policy asked (a forced plain round: 0), not the longer of the two.
                policy.observe(event, asked=asked.get(role, 0))
            else:
                policy.pass_round()


class HybridDraft:
    """Prompt lookup and a draft model (or head): per round, the one that pays.

    Under a fixed γ or the heuristic, lookup first and the model where the text offers no
    match. Under auto (`policy("auto")`), each source has its own policy (SourceChoice), so
    a model that does not pay no longer drags lookup's estimate down, nor do lookup's
    misses the model's: lookup is asked first, at no cost, and its match drafts where its
    expected rate beats the model's at the model's own γ; otherwise the model drafts at
    its γ, or, where neither pays, no one does.
    """

    kind: DraftKind = "hybrid"

    def __init__(self, lookup: DraftSource, model: DraftSource) -> None:
        self.lookup = lookup
        self.model = model
        self.name = f"lookup+{model.name}"
        self.choice: SourceChoice | None = None

    def policy(self, spec: str, gamma_max: int = GAMMA_MAX) -> GammaPolicy:
        """The γ policy to run the hybrid under: `spec` as `parse_policy` reads it."""
        policy = parse_policy(spec, gamma_max)
        self.choice = SourceChoice(gamma_max) if policy.name == "auto" else None
        return PlainSamples(self.choice) if self.choice else policy

    def prefill(self, ctx: Sequence[int]) -> None:
        self.lookup.prefill(ctx)
        self.model.prefill(ctx)

    def propose(
        self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator
    ) -> Proposal:
        choice = self.choice
        if choice is None:
            proposal = self.lookup.propose(ctx, n, params, rng)
            return proposal if proposal.tokens else self.model.propose(ctx, n, params, rng)
        lookup_gamma = choice.gamma("lookup", n)
        model_gamma = choice.gamma("model", n)
        proposal = Proposal()
        if lookup_gamma:
            proposal = self.lookup.propose(ctx, lookup_gamma, params, rng)
        if proposal.tokens and choice.prefers_lookup(len(proposal.tokens), model_gamma):
            choice.drafter = "lookup"
            return proposal
        if not model_gamma:  # neither drafts: a plain round, lookup's indexing its only cost
            return Proposal(catch_up_seconds=proposal.catch_up_seconds)
        choice.drafter = "model"
        return self.model.propose(ctx, model_gamma, params, rng)
