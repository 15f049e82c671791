"""Draft sources: where the γ proposed tokens of a round come from.

A draft model proposes tokens with the distribution q it drew them from; a
deterministic source (prompt lookup) proposes tokens with no distribution, which
verification treats as a point mass.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from specrun.core.constraint import Constraint
from specrun.core.costs import RoundLike
from specrun.core.gamma import (
    GAMMA_MAX,
    PER_TOKEN,
    AdaptiveGamma,
    GammaPolicy,
    GammaShape,
    PlainSamples,
    parse_policy,
)
from specrun.core.model import LanguageModel
from specrun.core.sampling import (
    CandidateRows,
    Candidates,
    Distribution,
    Draws,
    Row,
    SamplingParams,
    candidate_width,
    pick,
)
from specrun.core.sequence import Tokens
from specrun.core.trees import DraftTree

# A draft stopping at `p_min` judges its confidence on at least this many candidates where
# its device samples (llama.cpp's draft samples from its top 10).
P_MIN_CANDIDATES = 10

# Where proposals come from: a draft model, prompt lookup, lookup then a model or head,
# an EAGLE-3 head, the target's own MTP layers, a block draft (DFlash, DSpark), or suffix
# drafts (the request's text and earlier answers).
DraftKind = Literal["model", "lookup", "hybrid", "eagle3", "mtp", "dflash", "dspark", "suffix"]


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    probs: list[Distribution | None] = field(default_factory=list)  # q_i, or None for a point mass
    # Time spent taking in tokens committed while the source did not draft (plain rounds,
    # or a prompt not prefilled): a cost of having paused, not of drafting.
    catch_up_seconds: float = 0.0
    # Point masses that branch (`tokens` empty then): verified in one pass (core.trees).
    tree: DraftTree | None = None

    @property
    def size(self) -> int:
        """The drafts the target verifies: the tree's nodes, or the chain's tokens."""
        return len(self.tree) if self.tree is not None else len(self.tokens)

    def draw(
        self,
        row: Row,
        ctx: Sequence[int],
        params: SamplingParams,
        rng: Draws,
        allowed: Constraint | None,
        p_min: float,
    ) -> bool:
        """Draft the next token from a row as the target will see its position: with the bias
        and penalties for the text `ctx` and the drafts so far, among the tokens `allowed`
        lets through (a fork, moved on by the token). False, and no token, where the row's
        confidence is below `p_min`: drafting stops there."""
        if params.penalized and isinstance(row, np.ndarray):
            penalized = row.copy()
            history = ctx.then(self.tokens) if isinstance(ctx, Tokens) else [*ctx, *self.tokens]
            params.penalize(penalized, history)
            row = penalized
        if p_min > 0 and top_probability(row) < p_min:
            return False
        token, q = pick(row, params, rng, allowed, len(ctx) + len(self.tokens))
        self.tokens.append(token)
        self.probs.append(q)
        if allowed is not None:
            allowed.accept(token)
        return True


class DraftSource(Protocol):
    name: str
    kind: DraftKind

    def prefill(self, ctx: Sequence[int]) -> None:
        """Take in the prompt before the first round (may do nothing; `propose` catches up)."""

    def propose(
        self,
        ctx: Sequence[int],
        n: int,
        params: SamplingParams,
        rng: Draws,
        constraint: Constraint | None = None,
    ) -> Proposal:
        """Propose up to n tokens to follow ctx; under `constraint` (the committed text's
        state), only tokens it allows: a source that samples draws among them, and a
        deterministic one stops at its first token refused (`allowed_prefix`)."""


class TreeSource(Protocol):
    """A source whose drafts are point masses fixed by the text, which may branch."""

    leaves: int  # the most branches its trees have (1: chains)

    def propose_tree(self, ctx: Sequence[int], n: int, leaves: int) -> Proposal:
        """Up to n drafts after ctx, as a tree of up to `leaves` branches (a chain where one
        pays most, in `tokens`)."""
        ...


def as_proposal(tree: DraftTree) -> Proposal:
    """A grown tree as a proposal: a chain is verified as one (point masses), else as a tree."""
    if tree.is_chain:
        return Proposal(list(tree.tokens), [None] * len(tree))
    return Proposal(tree=tree)


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
        self,
        ctx: Sequence[int],
        n: int,
        params: SamplingParams,
        rng: Draws,
        constraint: Constraint | None = None,
    ) -> Proposal:
        proposal = Proposal()
        ctx = ctx if isinstance(ctx, Tokens) else Tokens(ctx)
        state = constraint.fork() if constraint is not None else None
        # After a round that drafted, the draft lacks at most the target's token and the
        # last accepted draft; more than that, it paused: catch up in one batch, timed apart.
        if len(ctx) - len(self.model.tokens) > 2:
            start = time.perf_counter()
            self.model.logits(ctx.but_last(), 0)
            proposal.catch_up_seconds = time.perf_counter() - start
        # Vocabularies may differ by padding (<= 128 ids): ids beyond the target's are never
        # proposed, so such a draft reads whole rows, cut to the target's vocabulary.
        top = candidate_width(params, self.target_vocab)
        if top is not None and self.p_min > 0:
            top = max(top, P_MIN_CANDIDATES)
        if self.model.n_vocab != self.target_vocab or state is not None:
            top = None
        for _ in range(n):
            rows = self.model.logits(ctx.then(proposal.tokens), 1, view=True, top=top)
            row = rows[0] if isinstance(rows, CandidateRows) else rows[0, : self.target_vocab]
            if not proposal.draw(row, ctx, params, rng, state, self.p_min):
                break
        return proposal


def allowed_prefix(proposal: Proposal, constraint: Constraint) -> Proposal:
    """A deterministic proposal (prompt lookup's) up to its first token `constraint`
    refuses."""
    state = constraint.fork()
    for i, (token, q) in enumerate(zip(proposal.tokens, proposal.probs)):
        if q is None and not state.allows(np.array([token]))[0]:
            return Proposal(proposal.tokens[:i], proposal.probs[:i], proposal.catch_up_seconds)
        state.accept(token)
    return proposal


def top_probability(row: Row) -> float:
    """The top token's probability at temperature 1, 1 / sum(exp(x - max)), with no
    probability vector: one float32 pass, summed in float64. On a device's candidates,
    among them (as llama.cpp's draft judges it, on its top 10)."""
    logits = row.logits if isinstance(row, Candidates) else row
    shifted = logits - logits.max()
    return 1.0 / float(np.exp(shifted, out=shifted).sum(dtype=np.float64))


LOOKUP = "lookup"  # the hybrid's name for its prompt lookup's policy


def gamma_shape(source: DraftSource) -> GammaShape:
    """How auto prices a source's drafts (GammaShape): a block draft declares its block
    (`BlockDraft.gamma_shape`); every other source drafts token by token."""
    shape: GammaShape = getattr(source, "gamma_shape", PER_TOKEN)
    return shape


def gamma_max_for(source: DraftSource | None, asked: int | None) -> int:
    """γ's upper bound: as asked; by default GAMMA_MAX, or a block draft's block where that is
    longer (one pass drafts the whole block, and auto prices each position of it)."""
    if asked is not None:
        return asked
    sources = source.drafts if isinstance(source, HybridDraft) else [source] if source else []
    return max([GAMMA_MAX, *(gamma_shape(s).block or 0 for s in sources)])


def policy_for(source: DraftSource | None, spec: str, gamma_max: int = GAMMA_MAX) -> GammaPolicy:
    """The γ policy `spec` names (as `parse_policy` reads it) for a draft source: auto priced
    by the source's shape, and the hybrid's auto choosing its source per round too."""
    if isinstance(source, HybridDraft):
        return source.policy(spec, gamma_max)
    return parse_policy(spec, gamma_max, PER_TOKEN if source is None else gamma_shape(source))


class SourceChoice:
    """auto for the hybrid: an adaptive policy per source (by its name), each of its source's
    shape (`gamma_shape`), learning its own acceptance (on the rounds its source drafted) and
    its own cost per token or per pass, and the loop's policy over them all (`next_gamma` the
    longest of their γ). A round is evidence for the source that drafted it; a round that no
    source drafted, for all; the others only count it as gone by (`AdaptiveGamma.pass_round`)."""

    name = "auto"

    def __init__(self, shapes: Mapping[str, GammaShape], gamma_max: int) -> None:
        self.policies = {
            name: AdaptiveGamma(gamma_max, shape=shape) for name, shape in shapes.items()
        }
        self.asked: dict[str, int] = {}  # this round's γ of each source asked
        self.drafter: str | None = None  # this round's

    def next_gamma(self) -> int:
        return max(policy.next_gamma() for policy in self.policies.values())

    def gamma(self, name: str, n: int) -> int:
        self.asked[name] = gamma = min(self.policies[name].next_gamma(), n)
        return gamma

    def rate(self, name: str, gamma: int) -> float | None:
        """The expected tokens per second of a source at γ, None where not yet measured."""
        return self.policies[name].rates().get(gamma)

    def observe(self, event: RoundLike) -> None:
        drafter, asked = self.drafter, self.asked
        self.drafter, self.asked = None, {}
        for name, policy in self.policies.items():
            if drafter is None or name == drafter:
                # As the policy asked (a forced plain round: 0), not the longest of them.
                policy.observe(event, asked=asked.get(name, 0))
            else:
                policy.pass_round()


class HybridDraft:
    """Prompt lookup and draft models or heads: per round, the one that pays.

    Under a fixed γ or the heuristic, lookup first and the first draft where the text
    offers no match. Under auto (`policy("auto")`), each source has its own policy
    (SourceChoice), so a source that does not pay no longer drags the others' estimates
    down: the draft (model, head or block) with the best expected rate at its own γ is the
    candidate (one not yet measured, or probing, first); lookup is asked first, at no cost, and its
    match drafts where its expected rate beats the candidate's, where no draft would
    draft, or where lookup's policy probes (a probe a comparison could veto would never
    bring evidence); otherwise the candidate drafts at its γ, or, where none pays, no one.
    """

    kind: DraftKind = "hybrid"

    def __init__(self, lookup: DraftSource | None, drafts: Sequence[DraftSource]) -> None:
        self.lookup = lookup
        self.drafts = list(drafts)
        self.name = "+".join(s.name for s in [*([lookup] if lookup else []), *self.drafts])
        self.choice: SourceChoice | None = None

    def policy(self, spec: str, gamma_max: int = GAMMA_MAX) -> GammaPolicy:
        """The γ policy to run the hybrid under: `spec` as `parse_policy` reads it."""
        policy = parse_policy(spec, gamma_max)
        shapes = {
            **({LOOKUP: gamma_shape(self.lookup)} if self.lookup else {}),
            **{draft.name: gamma_shape(draft) for draft in self.drafts},
        }
        self.choice = SourceChoice(shapes, gamma_max) if policy.name == "auto" else None
        return PlainSamples(self.choice) if self.choice else policy

    def prefill(self, ctx: Sequence[int]) -> None:
        for source in [*([self.lookup] if self.lookup else []), *self.drafts]:
            source.prefill(ctx)

    def propose(
        self,
        ctx: Sequence[int],
        n: int,
        params: SamplingParams,
        rng: Draws,
        constraint: Constraint | None = None,
    ) -> Proposal:
        choice = self.choice
        if choice is None:
            proposal = (
                self.lookup.propose(ctx, n, params, rng, constraint) if self.lookup else Proposal()
            )
            if proposal.tokens:
                return proposal
            return self.drafts[0].propose(ctx, n, params, rng, constraint)
        asked = {draft.name: choice.gamma(draft.name, n) for draft in self.drafts}
        candidate = self._candidate(choice, asked)
        proposal = Proposal()
        if self.lookup and (lookup_gamma := choice.gamma(LOOKUP, n)):
            proposal = self.lookup.propose(ctx, lookup_gamma, params, rng, constraint)
            if proposal.tokens and (
                candidate is None
                or choice.policies[LOOKUP].gamma == 0
                or _beats(choice.rate(LOOKUP, len(proposal.tokens)), choice.rate(*candidate))
            ):
                choice.drafter = LOOKUP
                return proposal
        if candidate is None:  # none drafts: a plain round, lookup's indexing its only cost
            return Proposal(catch_up_seconds=proposal.catch_up_seconds)
        name, gamma = candidate
        choice.drafter = name
        draft = next(d for d in self.drafts if d.name == name)
        return draft.propose(ctx, gamma, params, rng, constraint)

    @staticmethod
    def _candidate(choice: SourceChoice, asked: dict[str, int]) -> tuple[str, int] | None:
        """The draft to draft with and its γ: the best expected rate; before that, one not yet
        measured, one whose policy probes, or one passed over for long (a source whose turn
        loses to the others' rates would never bring the evidence that could bring it
        back)."""
        best: tuple[float, str] | None = None
        for name, gamma in asked.items():
            if gamma == 0:
                continue
            policy, rate = choice.policies[name], choice.rate(name, gamma)
            if rate is None or policy.gamma == 0 or policy.passed_over:
                return name, gamma
            if best is None or rate > best[0]:
                best = (rate, name)
        return (best[1], asked[best[1]]) if best else None


def _beats(rate: float | None, other: float | None) -> bool:
    """Whether a rate is at least another; one not yet measured loses to none."""
    return rate is None or other is None or rate >= other
