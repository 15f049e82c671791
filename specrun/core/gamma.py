"""γ policies: how many tokens the draft proposes in the next round.

Pure: a policy sees only the loop's Round events (duck-typed: `RoundLike`), so it is
tested without a model. What a round costs and yields is `costs`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, TypedDict

from specrun.core.costs import (
    CostModel,
    CostState,
    RoundLike,
    expected_tokens,
    is_plain_sample,
    round_rate,
)
from specrun.errors import OptionError
from specrun.system.numerals import whole_number

GAMMA_MAX = 8  # the longest draft the adaptive and heuristic policies try
GAMMA_LIMIT = 32  # the longest any policy may be asked for: a verify reads at most this + 1 rows
PRIOR = 1.0  # auto's weak prior: one accepted and one rejected token (α = 0.5)
# Plain samples (PlainSamples): after the first, more plain rounds come no sooner than
# PLAIN_SAMPLE_SPACING rounds later (so a fixed γ stays what was asked in 8 rounds of 9),
# and no sooner than the time since the last sample is 1/PLAIN_SAMPLE_COST times what the
# last forced rounds cost beyond drafting their tokens.
PLAIN_SAMPLE_SPACING = 24
PLAIN_SAMPLE_COST = 0.01
# Forced plain rounds come in threes: the first pays for following a draft and is not
# measured; the two after it measure plain decoding (DESIGN.md, γ).
PLAIN_SAMPLE_ROUNDS = 3
# A source of the hybrid passed over this many rounds while its own policy would draft gets
# a round: its estimate of α moves only on rounds it drafts, and one stale from bad luck
# would otherwise keep it out for good.
PASSED_OVER_ROUNDS = 32


class AcceptanceState(TypedDict, total=False):
    """What AdaptiveGamma learned of acceptance: one α's evidence, or a block's per position."""

    accepted: float  # token by token: the evidence, in drafted tokens
    rejected: float
    positions: list[list[float]]  # a block: each position's [accepted, rejected, prior weight]


class AdaptiveState(AcceptanceState):
    """What AdaptiveGamma learned (`state`), kept as JSON between runs (specrun.core.learned)."""

    gamma: int
    probe_interval: int
    costs: CostState


@dataclass(frozen=True)
class GammaShape:
    """How a draft source's cost and yield grow with γ, which auto prices.

    Token by token (a draft model, prompt lookup, a head): each drafted token costs t_draft
    and sees the drafts before it, so one α, the per-token acceptance, prices every γ. A
    block draft (DFlash, DSpark; `block`: the most tokens its one pass drafts) costs one
    pass whatever γ, and guesses every position at once, so its acceptance falls with the
    position: α per position (PositionAcceptance), γ at most the block."""

    block: int | None = None


PER_TOKEN = GammaShape()


class GammaPolicy(Protocol):
    name: str

    def next_gamma(self) -> int: ...

    def observe(self, event: RoundLike) -> None: ...


class FixedGamma:
    def __init__(self, gamma: int) -> None:
        self.gamma = gamma
        self.name = f"fixed:{gamma}"

    def next_gamma(self) -> int:
        return self.gamma

    def observe(self, event: RoundLike) -> None:
        pass


class HeuristicGamma:
    """Hugging Face transformers' schedule: +2 after a fully accepted round, -1 otherwise."""

    name = "heuristic"

    def __init__(self, gamma_max: int = GAMMA_MAX, start: int = 4) -> None:
        self.gamma_max = gamma_max
        self.gamma = max(1, min(start, gamma_max))

    def next_gamma(self) -> int:
        return self.gamma

    def observe(self, event: RoundLike) -> None:
        if event.gamma == 0:  # a round cut short to zero by the token limit says nothing
            return
        fully_accepted = event.drafted > 0 and event.accepted == event.drafted
        self.gamma += 2 if fully_accepted else -1
        self.gamma = max(1, min(self.gamma, self.gamma_max))


class PositionAcceptance:
    """A block draft's acceptance per position (GammaShape.block): α_k, the chance that its
    k-th token is accepted where the k - 1 before it were, and E[N](γ) = 1 + Σ_{k≤γ} Π_{i≤k} α_i.

    Each position keeps its evidence as AdaptiveGamma keeps α's: counts of its outcomes
    weighted down by `decay` at each new one, capped at `max_evidence`, from a weak prior
    (PRIOR accepted and PRIOR rejected) that fades as outcomes come and returns while the
    policy decodes plainly (`fade`). A round that drafted d and had a accepted shows
    positions 1..a accepted and a + 1 rejected where a < d; later positions went unseen.
    A position's prior leans to the estimate of the one before it (the first's, to 0.5): a
    position not yet seen is expected to do as its neighbour, so γ grows into it where that
    would pay, and its own outcomes then show where acceptance falls off."""

    def __init__(self, positions: int, decay: float, max_evidence: float) -> None:
        self.decay = decay
        self.max_evidence = max_evidence
        # Per position: accepted, rejected, and the prior's weight.
        self.evidence = [[0.0, 0.0, 2 * PRIOR] for _ in range(positions)]

    def alphas(self) -> list[float]:
        alphas, before = [], 0.5
        for accepted, rejected, prior in self.evidence:
            before = (accepted + prior * before) / (accepted + rejected + prior)
            alphas.append(before)
        return alphas

    def expected_tokens(self, gamma: int) -> float:
        tokens = reached = 1.0
        for alpha in self.alphas()[:gamma]:
            reached *= alpha
            tokens += reached
        return tokens

    def observe(self, drafted: int, accepted: int) -> None:
        for k in range(min(drafted, accepted + 1, len(self.evidence))):
            counts = self.evidence[k]
            counts[:] = [self.decay * count for count in counts]
            counts[0 if k < accepted else 1] += 1.0
            total = sum(counts)
            if total > self.max_evidence:
                counts[:] = [count * self.max_evidence / total for count in counts]

    def fade(self) -> None:
        """Toward the prior, as AdaptiveGamma._fade_evidence."""
        for counts in self.evidence:
            accepted, rejected, prior = counts
            counts[:] = [
                self.decay * accepted,
                self.decay * rejected,
                2 * PRIOR + self.decay * (prior - 2 * PRIOR),
            ]

    def resume(self, evidence: list[list[float]], weight: float) -> None:
        """Take over saved evidence, all of it together weighing at most `weight` outcomes."""
        total = sum(sum(counts) for counts in evidence)
        scale = weight / total if total > weight else 1.0
        self.evidence = [[float(count) * scale for count in counts] for counts in evidence]


class AdaptiveGamma:
    """Pick γ ∈ [0, γ_max] maximising E[N](α, γ) / (γ·t_d + t_v(γ+1) + t_o).

    α is the per-token acceptance of recent rounds, accepted / (accepted + rejections),
    from exponentially weighted counts with a cap on the evidence kept, so it follows
    changes of text within a few rounds. γ = 0 is plain decoding: where speculation
    does not pay, the policy falls back to it and probes γ ≥ 1 now and then so it can
    come back, spacing the probes so that their extra cost stays within
    `probe_budget` of the time. A new γ must beat the current one by `hysteresis` to
    be taken, which stops oscillation.

    A block draft (`shape`, GammaShape) drafts in one pass: t_d is that pass's cost, paid once
    whatever γ, and E[N] comes from an α per position (PositionAcceptance), γ at most the block.
    """

    name = "auto"

    def __init__(
        self,
        gamma_max: int = GAMMA_MAX,
        *,
        shape: GammaShape = PER_TOKEN,
        decay: float = 0.9,
        max_evidence: float = 32.0,
        hysteresis: float = 0.05,
        probe_budget: float = 0.02,
        first_probe_after: int = 8,
        max_probe_interval: int = 512,
    ) -> None:
        self.gamma_max = gamma_max if shape.block is None else min(gamma_max, shape.block)
        self.decay = decay
        self.max_evidence = max_evidence
        self.hysteresis = hysteresis
        self.probe_budget = probe_budget
        self.costs = CostModel(per_pass=shape.block is not None)
        self._accepted = self._rejected = PRIOR  # token by token
        self.positions = (
            None if shape.block is None else PositionAcceptance(self.gamma_max, decay, max_evidence)
        )
        # Plain rounds, then a one-token draft: a first measure of every cost and of α.
        # The first round after the prompt pays one-time costs and is not measured; two
        # more give plain decoding's cost, which later rounds at γ > 0 no longer update.
        self._warmup = [0, 0, 0, 1] if self.gamma_max > 0 else [0]
        self._first_round = True
        self._pays: bool | None = None  # _could_pay's answer at the current costs
        self.gamma = 0
        self._probe_interval = first_probe_after
        self._max_probe_interval = max_probe_interval
        self._rounds_at_zero = 0
        self._shared = (0, 0)  # the last round's other slots in its verify: rows, slots

    @property
    def alpha(self) -> float:
        return self._accepted / (self._accepted + self._rejected)

    def expected_tokens(self, gamma: int, perfect: bool = False) -> float:
        """E[N] of a round at γ: at the recent acceptance, or with every draft accepted."""
        if perfect:
            return gamma + 1.0
        if self.positions is not None:
            return self.positions.expected_tokens(gamma)
        return expected_tokens(self.alpha, gamma)

    def rates(self, perfect: bool = False) -> dict[int, float]:
        """Expected tokens per second of every γ whose costs are known (measured or
        extrapolated), at the recent acceptance or with every draft accepted, from one
        verify curve.

        Where other slots share the verify's batch (as they did last round), a γ costs the
        verify of their rows and its own, and every slot's round waits for it: the rate counts
        the others' tokens too, a token each at least. So a full batch turns speculation down
        where its rows cost more than they bring, and a quiet server turns it back up."""
        t_overhead = self.costs.t_overhead or 0.0
        shared_rows, shared_with = self._shared
        curve = self.costs.verify_curve(shared_rows + self.gamma_max + 1)[shared_rows:]
        table: dict[int, float] = {}
        for gamma, t_verify in enumerate(curve):
            drafting = self.costs.drafting_seconds(gamma)
            if drafting is None:
                break
            rate = round_rate(
                self.expected_tokens(gamma, perfect) + shared_with,
                drafting + t_verify + t_overhead,
            )
            if math.isfinite(rate):
                table[gamma] = rate
        return table

    def best_gamma(self, rates: dict[int, float] | None = None) -> int:
        rates = self.rates() if rates is None else rates
        return max(rates, key=rates.__getitem__) if rates else self.gamma

    def next_gamma(self) -> int:
        if self._warmup:
            return self._warmup[0]
        if self.gamma == 0 and self._rounds_at_zero >= self._probe_interval and self._could_pay():
            return 1  # the cheapest probe: one drafted token is evidence enough to come back
        return self.gamma

    def _could_pay(self) -> bool:
        """Whether some γ ≥ 1 would beat plain decoding if every drafted token were accepted.
        If not (a draft as slow as its target), probing cannot bring speculation back.
        It depends on the costs alone: worked out once after each change of them."""
        if self._pays is None:
            perfect = self.rates(perfect=True)
            plain = perfect.pop(0, None)
            if plain is None or self.costs.drafting_seconds(1) is None:
                return True  # nothing known yet: find out
            self._pays = any(rate > plain * (1 + self.hysteresis) for rate in perfect.values())
        return self._pays

    def observe(self, event: RoundLike, asked: int | None = None) -> None:
        """Learn from a round; `asked` is the γ this policy asked for where the loop asked
        another (the hybrid's SourceChoice asks the longest of several)."""
        asked = event.gamma if asked is None else asked
        self._rounds_passed = 0
        self._shared = (event.shared_rows, event.shared_with)
        was_probe = self.gamma == 0 and asked > 0 and not self._warmup
        if self._first_round:
            self._first_round = False
        else:
            self.costs.observe(event)
            self._pays = None
        if event.drafted > 0:
            self._add_evidence(event.drafted, event.accepted)
        elif self.gamma == 0:
            self._fade_evidence()
        if self._warmup:
            self._warmup.pop(0)
            self.gamma = self._warmup[0] if self._warmup else self.best_gamma()
            if not self._warmup and self.costs.drafting_seconds(1) is None:
                self._rounds_at_zero = self._probe_interval  # nothing drafted yet: probe at once
            return
        # At γ 0 where no γ ≥ 1 would win even were every draft accepted, none wins now: no
        # table of rates to build, round after round, where nothing pays.
        if self.gamma > 0 or self._could_pay():
            rates = self.rates()  # each γ once: the current and the best rate come from one table
            best = self.best_gamma(rates)
            current, candidate = rates.get(self.gamma), rates.get(best)
            if current is None or (
                candidate is not None and candidate > current * (1 + self.hysteresis)
            ):
                self.gamma = best
        if self.gamma > 0:
            self._rounds_at_zero = 0
        elif not was_probe:
            self._rounds_at_zero += 1
        elif event.drafted == 0 and event.draft_seconds < 0.25 * self._plain_round(event):
            pass  # prompt lookup found no match, at next to no cost: no evidence yet, probe again
        else:
            self._space_probes(event)

    def pass_round(self) -> None:
        """A round went by that another source drafted (the hybrid's): while this policy
        decodes plainly it counts toward the next probe, and its evidence fades as in a
        plain round; nothing of the round's costs is its own."""
        self._rounds_passed += 1
        if self.gamma == 0 and not self._warmup:
            self._rounds_at_zero += 1
            self._fade_evidence()

    @property
    def passed_over(self) -> bool:
        """Whether it would draft but others have drafted PASSED_OVER_ROUNDS rounds since."""
        return self.gamma > 0 and self._rounds_passed >= PASSED_OVER_ROUNDS

    def state(self) -> AdaptiveState:
        """What it learned, for a later run on the same pair and machine (specrun.core.learned)."""
        state: AdaptiveState = {
            "gamma": self.gamma,
            "probe_interval": self._probe_interval,
            "costs": self.costs.state(),
        }
        if self.positions is not None:
            state["positions"] = [list(counts) for counts in self.positions.evidence]
        else:
            state["accepted"], state["rejected"] = self._accepted, self._rejected
        return state

    def fits(self, state: AdaptiveState) -> bool:
        """Whether a saved state is of this policy's shape: one α, or as many positions."""
        if self.positions is None:
            return "positions" not in state
        return len(state.get("positions", ())) == len(self.positions.evidence)

    def resume(self, state: AdaptiveState, evidence: float = 8.0, samples: int = 3) -> None:
        """Start from a saved state of its shape (`fits`) instead of the warm-up, trusting it as
        much as a few rounds (`evidence` drafted tokens, `samples` measurements of each cost):
        a new text soon shows."""
        self.costs.resume(state["costs"], samples)
        self._pays = None
        if self.positions is not None:
            self.positions.resume(state["positions"], evidence)
        else:
            accepted, rejected = float(state["accepted"]), float(state["rejected"])
            scale = min(1.0, evidence / (accepted + rejected))
            self._accepted, self._rejected = accepted * scale, rejected * scale
        self.gamma = max(0, min(int(state["gamma"]), self.gamma_max))
        self._probe_interval = max(1, min(int(state["probe_interval"]), self._max_probe_interval))
        self._rounds_at_zero = 0
        self._rounds_passed = 0  # rounds another source drafted (the hybrid's) since its last
        self._warmup = []
        self._first_round = True

    def _add_evidence(self, drafted: int, accepted: int) -> None:
        if self.positions is not None:
            self.positions.observe(drafted, accepted)
            return
        self._accepted = self.decay * self._accepted + accepted
        self._rejected = self.decay * self._rejected + (accepted < drafted)
        # Long accepted drafts pile up evidence fast; cap it so a change of text
        # shows within a few rounds whatever γ was.
        evidence = self._accepted + self._rejected
        if evidence > self.max_evidence:
            self._accepted *= self.max_evidence / evidence
            self._rejected *= self.max_evidence / evidence

    def _fade_evidence(self) -> None:
        """α is about the text now being written, and while the policy decodes plainly the
        text goes by unmeasured: old evidence fades toward the prior, so after a stretch of
        plain rounds a successful probe can bring speculation back (prompt lookup, after
        prose that matched nothing, reaching an extraction that copies its input). Not
        while drafting: a lookup round that found no match, or a plain sample, says
        nothing about the text drafts are judged on."""
        if self.positions is not None:
            self.positions.fade()
            return
        self._accepted = PRIOR + self.decay * (self._accepted - PRIOR)
        self._rejected = PRIOR + self.decay * (self._rejected - PRIOR)

    def _plain_round(self, event: RoundLike) -> float:
        """Seconds of one plain-decoding round, as measured (or this round's verify)."""
        t_verify = self.costs.t_verify(self._shared[0] + 1)
        return t_verify + (self.costs.t_overhead or 0.0) if t_verify else event.verify_seconds

    def _space_probes(self, probe: RoundLike) -> None:
        """Wait so long that probing costs about `probe_budget` of the time.

        A probe costs a fixed extra over a plain round, plus the draft catching up on
        every token it skipped, so waiting longer also makes the next probe dearer.
        Where catching up alone costs more than the budget, probes stop (until the
        longest interval has passed). Otherwise the interval at most doubles from one
        probe to the next: one probe's timings may be an outlier (the first decode at a new
        verify width costs up to twice the next), and a wait set by it alone could stop
        probing for the rest of a generation."""
        plain_round = self._plain_round(probe)
        catch_up = probe.catch_up_seconds / max(self._rounds_at_zero, 1)  # per skipped token
        fixed_extra = max(
            probe.draft_seconds + probe.verify_seconds + probe.overhead_seconds - plain_round, 0.0
        )
        affordable = self.probe_budget * plain_round - catch_up  # per round waited
        if affordable <= 0:
            self._probe_interval = self._max_probe_interval
        else:
            self._probe_interval = max(
                1,
                min(
                    math.ceil(fixed_extra / affordable),
                    2 * self._probe_interval,
                    self._max_probe_interval,
                ),
            )
        self._rounds_at_zero = 0


class PlainSamples:
    """Another policy, with a plain round now and then: the measured cost of plain decoding
    that the speedup figure divides by (`Stats.estimated_speedup`).

    A sample is a plain round right after another (`is_plain_sample`). Each generation
    forces PLAIN_SAMPLE_ROUNDS plain rounds from its second (the first pays one-time
    costs), then again whenever PLAIN_SAMPLE_SPACING rounds and enough time have passed
    since the last sample. Spread over the generation, the samples follow a plain token's
    cost as the context grows and take in the machine's hiccups as plain decoding would; a
    single early sample read 2-5% cheap. Enough time: forced rounds cost what they take
    beyond drafting the same tokens, so waiting 1/PLAIN_SAMPLE_COST times that keeps the
    samples under 1% of the time, however much speculation gains; where it loses, plain
    rounds cost nothing. Plain rounds the policy chooses itself (auto where nothing pays)
    are samples too, and nothing is forced.
    """

    def __init__(self, policy: GammaPolicy) -> None:
        self.policy = policy
        self.name = policy.name
        self._start()

    def _start(self) -> None:
        self._round = 0
        self._forced = 0  # forced plain rounds still to come
        self._forced_seconds: list[float] = []  # of the last forced rounds
        self._last_drafted: int | None = None
        self._since_rounds = 0  # since the last sample
        self._since_seconds = 0.0
        self._drafting_tokens = 0  # of drafting rounds since the last sample
        self._drafting_seconds = 0.0

    def next_gamma(self) -> int:
        return 0 if self._forced else self.policy.next_gamma()

    def observe(self, event: RoundLike) -> None:
        self.policy.observe(event)
        if event.finish_reason:  # figures are kept per generation
            self._start()
            return
        if self._forced:
            self._forced -= 1
            self._forced_seconds.append(event.seconds)
        if is_plain_sample(event, self._last_drafted):
            self._since_rounds = self._since_seconds = self._drafting_tokens = (
                self._drafting_seconds
            ) = 0
        else:
            self._since_rounds += 1
            self._since_seconds += event.seconds
            if event.drafted and self._round > 0:  # the first round pays one-time costs
                self._drafting_tokens += event.accepted + 1
                self._drafting_seconds += event.seconds
        self._last_drafted = event.drafted
        self._round += 1
        if not self._forced and (
            self._round == 1
            or (
                self._since_rounds >= PLAIN_SAMPLE_SPACING
                and self._since_seconds * PLAIN_SAMPLE_COST >= self._excess()
            )
        ):
            self._forced, self._forced_seconds = PLAIN_SAMPLE_ROUNDS, []

    def _excess(self) -> float:
        """What the last forced rounds cost beyond drafting as many tokens at the rate of
        the drafting rounds since."""
        if not self._drafting_tokens:
            return 0.0
        forced = self._forced_seconds
        return max(sum(forced) - len(forced) * self._drafting_seconds / self._drafting_tokens, 0.0)


def parse_policy(
    spec: str, gamma_max: int = GAMMA_MAX, shape: GammaShape = PER_TOKEN
) -> GammaPolicy:
    """`auto`, `heuristic` or a fixed number N (0 = plain decoding); each with plain
    samples, except plain decoding itself. auto prices γ by the draft's `shape`."""
    if not 0 <= gamma_max <= GAMMA_LIMIT:
        raise OptionError(f"`gamma_max` must be between 0 and {GAMMA_LIMIT}, got {gamma_max}")
    spec = spec.strip().lower()
    if spec == "auto":
        return PlainSamples(AdaptiveGamma(gamma_max, shape=shape))
    if spec == "heuristic":
        return PlainSamples(HeuristicGamma(gamma_max))
    gamma = whole_number(spec.removeprefix("fixed:"))
    if gamma is not None:
        if gamma > GAMMA_LIMIT:
            raise OptionError(f"`gamma` {gamma} is too large (at most {GAMMA_LIMIT})")
        return PlainSamples(FixedGamma(gamma)) if gamma else FixedGamma(0)
    raise OptionError(f"`gamma` must be auto, heuristic or a number, got {spec!r}")
