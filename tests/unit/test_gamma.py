"""γ policies, without a model: rounds are simulated from a known acceptance rate and
known costs, so the best γ is known and the policy's choices can be judged."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from specrun.core.costs import CostModel, expected_rate
from specrun.core.drafting import HybridDraft, Proposal
from specrun.core.gamma import (
    PLAIN_SAMPLE_COST,
    PLAIN_SAMPLE_ROUNDS,
    PLAIN_SAMPLE_SPACING,
    AdaptiveGamma,
    FixedGamma,
    HeuristicGamma,
    PlainSamples,
    parse_policy,
)
from specrun.core.loop import Round
from specrun.core.stats import Stats
from specrun.errors import SpecrunError


@dataclass
class SimRound:
    gamma: int
    drafted: int
    accepted: int
    draft_seconds: float
    verify_seconds: float
    overhead_seconds: float
    finish_reason: str | None = None
    catch_up_seconds: float = 0.0
    verify_first_of_shape: bool = False
    shared_rows: int = 0
    shared_with: int = 0

    @property
    def tokens(self) -> int:
        return self.accepted + 1

    @property
    def seconds(self) -> float:
        return (
            self.catch_up_seconds + self.draft_seconds + self.verify_seconds + self.overhead_seconds
        )


@dataclass
class Machine:
    """Per-token acceptance `alpha`, draft time per token, verify time a + b·width."""

    alpha: float
    t_draft: float
    verify_base: float
    verify_per_token: float
    overhead: float = 0.0002
    catch_up: float = 0.0  # draft time per token it skipped while γ was 0

    def t_verify(self, width: int) -> float:
        return self.verify_base + self.verify_per_token * width

    def rate(self, gamma: int) -> float:
        return expected_rate(
            self.alpha, gamma, self.t_draft, self.t_verify(gamma + 1), self.overhead
        )

    def best_rate(self, gamma_max: int) -> float:
        return max(self.rate(g) for g in range(gamma_max + 1))

    def round(self, gamma: int, rng: np.random.Generator, skipped: int = 0) -> SimRound:
        accepted = 0
        while accepted < gamma and rng.random() < self.alpha:
            accepted += 1
        jitter = rng.uniform(0.97, 1.03)  # measured times are never exact
        catch_up_seconds = (skipped * self.catch_up if gamma else 0.0) * jitter
        return SimRound(
            gamma,
            gamma,
            accepted,
            gamma * self.t_draft * jitter,
            self.t_verify(gamma + 1) * jitter,
            self.overhead,
            catch_up_seconds=catch_up_seconds,
        )


def simulate(policy, machine: Machine, rounds: int, seed: int = 0) -> list[SimRound]:
    rng = np.random.default_rng(seed)
    history: list[SimRound] = []
    skipped = 0  # tokens committed since the draft last ran
    for _ in range(rounds):
        event = machine.round(policy.next_gamma(), rng, skipped)
        skipped = skipped + event.tokens if event.gamma == 0 else 0
        policy.observe(event)
        history.append(event)
    return history


def throughput(history: list[SimRound]) -> float:
    return sum(r.tokens for r in history) / sum(r.seconds for r in history)


GPU_LIKE = Machine(
    alpha=0.8, t_draft=0.002, verify_base=0.030, verify_per_token=0.0005
)  # verify nearly flat
CPU_LIKE = Machine(
    alpha=0.75, t_draft=0.0045, verify_base=0.0045, verify_per_token=0.0035
)  # steep verify
SAME_MODEL = Machine(
    alpha=0.98, t_draft=0.008, verify_base=0.0045, verify_per_token=0.0035
)  # draft as slow as target
HARD = Machine(
    alpha=0.1, t_draft=0.001, verify_base=0.010, verify_per_token=0.001
)  # pays only at high α


def test_fixed_policy_is_fixed():
    policy = FixedGamma(3)
    simulate(policy, GPU_LIKE, 20)
    assert policy.next_gamma() == 3 and policy.name == "fixed:3"


def test_heuristic_grows_after_full_acceptance_and_shrinks_after_a_rejection():
    policy = HeuristicGamma(gamma_max=8, start=4)
    policy.observe(SimRound(4, 4, 4, 0, 0, 0))
    assert policy.next_gamma() == 6
    policy.observe(SimRound(6, 6, 6, 0, 0, 0))
    assert policy.next_gamma() == 8  # capped at γ_max
    policy.observe(SimRound(8, 8, 2, 0, 0, 0))
    assert policy.next_gamma() == 7
    for _ in range(10):
        policy.observe(SimRound(policy.next_gamma(), policy.next_gamma(), 0, 0, 0, 0))
    assert policy.next_gamma() == 1  # never below 1


@pytest.mark.parametrize(
    "machine", [GPU_LIKE, CPU_LIKE, SAME_MODEL], ids=["gpu-like", "cpu-like", "same-model"]
)
def test_adaptive_reaches_the_best_fixed_rate(machine):
    """Against the best fixed γ (or plain) run on the same random acceptances, several seeds."""
    best = max(range(9), key=machine.rate)
    ratios = []
    for seed in range(5):
        auto = throughput(simulate(AdaptiveGamma(8), machine, 400, seed))
        ratios.append(auto / throughput(simulate(FixedGamma(best), machine, 400, seed)))
        assert auto >= 0.95 * throughput(
            simulate(FixedGamma(0), machine, 400, seed)
        )  # never much below plain
    assert np.mean(ratios) >= 0.96 and min(ratios) >= 0.93, ratios  # the issue asks for 95%


def test_probes_stay_cheap_when_the_draft_must_catch_up():
    """On a CPU, a draft that skipped N tokens spends ~N/10 plain rounds catching up before
    a probe: probes must then be rare enough not to cost more than a few percent."""
    machine = Machine(
        alpha=0.75, t_draft=0.0048, verify_base=0.0045, verify_per_token=0.0035, catch_up=0.0008
    )
    for seed in range(5):
        auto = throughput(simulate(AdaptiveGamma(8), machine, 500, seed))
        assert auto >= 0.97 * throughput(simulate(FixedGamma(0), machine, 500, seed))


def test_adaptive_speculates_where_it_pays_and_not_where_it_does_not():
    fast = AdaptiveGamma(8)
    simulate(fast, GPU_LIKE, 200)
    best = max(range(9), key=GPU_LIKE.rate)
    # Within the 5% hysteresis of the best γ.
    assert fast.next_gamma() >= 2 and GPU_LIKE.rate(fast.next_gamma()) >= 0.95 * GPU_LIKE.rate(best)
    slow = AdaptiveGamma(8)
    history = simulate(slow, SAME_MODEL, 200)
    assert sum(r.gamma == 0 for r in history[-100:]) >= 90  # plain decoding, apart from rare probes


def test_adaptive_follows_a_change_of_text_and_probes_back():
    """Where acceptance falls so far that speculation costs more than it gives, back off
    towards plain decoding; when it rises again, a probe finds out and speculation resumes."""
    easy = Machine(alpha=0.9, t_draft=0.001, verify_base=0.010, verify_per_token=0.001)
    assert max(range(9), key=easy.rate) >= 3 and max(range(9), key=HARD.rate) == 0
    for seed in range(5):
        policy = AdaptiveGamma(8)
        simulate(policy, easy, 100, seed)
        assert policy.next_gamma() >= 3
        history = simulate(policy, HARD, 100, seed + 10)
        assert all(r.gamma <= 1 for r in history[30:])  # backed off within 30 rounds
        plain = simulate(FixedGamma(0), HARD, 100, seed + 10)
        assert throughput(history[30:]) >= 0.92 * throughput(plain[30:])
        history = simulate(policy, easy, 150, seed + 20)
        came_back = next(
            i for i, r in enumerate(history) if all(h.gamma >= 2 for h in history[i : i + 20])
        )
        assert came_back <= 100  # within a few probe intervals (at most 32 rounds each)


def test_adaptive_does_not_oscillate_in_a_steady_state():
    history = simulate(AdaptiveGamma(8), GPU_LIKE, 400)
    changes = sum(a.gamma != b.gamma for a, b in zip(history[200:], history[201:]))
    assert changes <= 10


def test_catching_up_does_not_count_as_drafting_cost():
    policy = AdaptiveGamma(4)
    simulate(policy, HARD, 60)
    t_draft = policy.costs.t_draft
    for _ in range(600):
        if policy.next_gamma() > 0:
            break
        policy.observe(HARD.round(0, np.random.default_rng(0)))
    assert policy.next_gamma() == 1, "no probe came, or not the cheapest"
    # A probe after a long pause: catching up costs a thousand drafted tokens.
    policy.observe(SimRound(1, 1, 1, HARD.t_draft, 0.01, 0.0002, catch_up_seconds=1.0))
    assert policy.costs.t_draft == pytest.approx(t_draft, rel=0.05)


def test_no_probes_where_even_perfect_acceptance_would_not_pay():
    history = simulate(AdaptiveGamma(8), SAME_MODEL, 300)
    assert all(r.gamma == 0 for r in history[4:])  # after the warm-up: plain decoding only


def test_the_first_decode_of_a_shape_is_no_sample_of_its_cost():
    costs = CostModel(decay=None)
    costs.observe(SimRound(0, 0, 0, 0.0, 0.010, 0.0))
    costs.observe(
        SimRound(1, 1, 1, 0.001, 0.020, 0.0, verify_first_of_shape=True)
    )  # graph setup included
    assert costs.measured_widths == {1: 0.010}
    assert costs.t_draft == pytest.approx(0.001)  # the draft's time and the overhead still count
    costs.observe(SimRound(1, 1, 1, 0.001, 0.012, 0.0))
    assert costs.t_verify(2) == pytest.approx(0.012)


def test_cost_model_interpolates_unmeasured_widths():
    costs = CostModel(decay=None)

    def curve_is_t_verify() -> bool:  # the policy reads the curve, worked out once per update
        return costs.verify_curve(9) == [costs.t_verify(width) for width in range(1, 10)]

    assert costs.t_verify(3) is None and costs.verify_curve(9) == []
    costs.observe(SimRound(0, 0, 0, 0.0, 0.010, 0.0))  # width 1
    assert costs.t_verify(5) == 0.010  # one width known: assume flat
    assert curve_is_t_verify()
    costs.observe(SimRound(4, 4, 4, 0.004, 0.030, 0.0))  # width 5
    assert costs.t_verify(3) == pytest.approx(0.020)  # between measured widths
    assert (
        costs.t_verify(7) == 0.030
    )  # beyond the widest measured, one sample each end: flat, to be explored
    assert curve_is_t_verify()
    costs.observe(SimRound(0, 0, 0, 0.0, 0.010, 0.0))
    costs.observe(SimRound(4, 4, 4, 0.004, 0.030, 0.0))
    assert costs.t_verify(7) == pytest.approx(
        0.040
    )  # both ends measured twice: along the last slope
    assert curve_is_t_verify() and costs.verify_curve(9)[6] == pytest.approx(0.040)
    costs.observe(SimRound(2, 2, 2, 0.002, 0.015, 0.0))  # width 3
    assert costs.t_verify(2) == pytest.approx(0.0125)
    assert costs.t_draft == pytest.approx(0.001)
    costs.observe(SimRound(0, 0, 0, 0.0, 0.025, 0.0))
    assert costs.t_verify(1) == pytest.approx(0.015)  # a plain mean without decay
    assert curve_is_t_verify()
    costs.observe(
        SimRound(6, 6, 6, 0.006, 0.025, 0.0)
    )  # width 7, cheaper than width 5: noise, or a GPU
    assert costs.t_verify(9) == 0.025  # a falling slope is not extended: flat, to be explored
    assert curve_is_t_verify()


@pytest.mark.parametrize(
    "spec, name",
    [("auto", "auto"), ("heuristic", "heuristic"), ("3", "fixed:3"), ("fixed:0", "fixed:0")],
)
def test_parse_policy(spec, name):
    assert parse_policy(spec).name == name


def test_a_stalled_verify_is_not_taken_as_the_cost_of_its_width():
    costs = CostModel()
    costs.observe(SimRound(0, 0, 0, 0.0, 0.010, 0.0))
    costs.observe(SimRound(1, 1, 1, 0.004, 2.5, 0.0))  # width 2, stalled 2.5 s
    assert costs.t_verify(2) == pytest.approx(0.030)  # at most 1.5 x 2 single decodes
    costs.observe(SimRound(3, 3, 3, 0.004, 0.025, 0.0))  # width 4, an ordinary sample, kept
    assert costs.t_verify(4) == 0.025


@pytest.mark.parametrize("spec", ["fast", "-1", "99"])
def test_parse_policy_rejects_bad_values(spec):
    with pytest.raises(SpecrunError):
        parse_policy(spec)


def test_the_first_round_after_the_prompt_is_not_measured():
    """It pays one-time costs; taken as plain decoding's cost it would make speculation look
    good."""
    policy = AdaptiveGamma(8)
    policy.observe(SimRound(0, 0, 0, 0.0, 0.050, 0.0))  # slow: first decode after the prompt
    policy.observe(SimRound(0, 0, 0, 0.0, 0.010, 0.0))
    policy.observe(SimRound(0, 0, 0, 0.0, 0.012, 0.0))
    assert policy.costs.t_verify(1) == pytest.approx(0.011)  # the mean of the two measured rounds


def test_plain_samples_in_every_generation():
    """Three plain rounds from each generation's second, then three more every
    PLAIN_SAMPLE_SPACING rounds where plain decoding costs no more than drafting."""
    policy = PlainSamples(FixedGamma(3))
    gammas = []
    for length in (60, 5):  # two generations; the last round of each ends it
        for i in range(length):
            gammas.append(policy.next_gamma())
            policy.observe(
                SimRound(
                    gammas[-1],
                    gammas[-1],
                    0,
                    0.0,
                    0.01,
                    0.0,
                    finish_reason="length" if i == length - 1 else None,
                )
            )
    plain = [i for i, g in enumerate(gammas) if g == 0]
    assert (PLAIN_SAMPLE_ROUNDS, PLAIN_SAMPLE_SPACING) == (3, 24)
    assert plain == [1, 2, 3, 28, 29, 30, 55, 56, 57, 61, 62, 63]
    assert parse_policy("0").next_gamma() == 0 and isinstance(parse_policy("4"), PlainSamples)


def test_plain_samples_cost_under_one_percent_where_speculation_pays():
    """Drafting rounds commit 4 tokens in 20 ms, a plain token costs 10 ms: three forced
    plain rounds cost 15 ms over drafting, so they come about every 1.5 s of decoding, not
    every 24 rounds."""
    policy = PlainSamples(FixedGamma(3))
    total, plain = 0.0, []
    for i in range(5000):
        gamma = policy.next_gamma()
        event = SimRound(
            gamma, gamma, gamma, 0.008 if gamma else 0.0, 0.012 if gamma else 0.010, 0.0
        )
        policy.observe(event)
        total += event.seconds
        plain += [i] if gamma == 0 else []
    starts = plain[::PLAIN_SAMPLE_ROUNDS]
    assert plain == [s + k for s in starts for k in range(PLAIN_SAMPLE_ROUNDS)]
    cost = (len(plain) - PLAIN_SAMPLE_ROUNDS) * (0.010 - 0.020 / 4)  # after the first ones
    assert 0.5 * PLAIN_SAMPLE_COST < cost / total <= PLAIN_SAMPLE_COST
    assert min(b - a for a, b in zip(starts[1:], starts[2:])) > 2 * PLAIN_SAMPLE_SPACING


def growing_generation(
    policy, machine: Machine, rng: np.random.Generator, tokens: int = 128
) -> list[Round]:
    """One generation on `machine`, where every forward pass grows dearer with the context
    (+5% over the generation, as measured on the demo pair) and 3% of rounds stall (+60%)."""
    rounds, position, skipped = [], 0, 0
    while position < tokens:
        event = machine.round(policy.next_gamma(), rng, skipped)
        scale = (1 + 0.05 * position / tokens) * (1.6 if rng.random() < 0.03 else 1.0)
        event = replace(
            event,
            draft_seconds=event.draft_seconds * scale,
            verify_seconds=event.verify_seconds * scale,
            finish_reason="length" if position + event.tokens >= tokens else None,
        )
        skipped = skipped + event.tokens if event.gamma == 0 else 0
        position += event.tokens
        policy.observe(event)
        rounds.append(as_round(event))
    return rounds


@pytest.mark.parametrize("spec", ["1", "3"])
def test_speedup_estimate_follows_a_growing_context_and_stalls(spec):
    """Samples spread over each generation: a single sample early in it reads plain decoding
    cheap (short context, no stall), by 1-4% here."""
    rng = np.random.default_rng(0)
    policy, plain_policy = parse_policy(spec), FixedGamma(0)
    estimated, true = [], []
    for _ in range(100):
        stats, plain = Stats(), Stats()
        for event in growing_generation(policy, CPU_LIKE, rng):
            stats.add(event)
        for event in growing_generation(plain_policy, CPU_LIKE, rng):
            plain.add(event)
        estimated.append(stats.estimated_speedup)
        true.append(stats.tokens_per_second / plain.tokens_per_second)
    assert np.mean(estimated) == pytest.approx(np.mean(true), rel=0.02)


def as_round(r: SimRound) -> Round:
    tokens = tuple(range(r.tokens))
    return Round(
        tokens,
        (True,) * r.accepted + (False,),
        (),
        r.gamma,
        r.drafted,
        r.accepted,
        r.draft_seconds,
        r.verify_seconds,
        r.overhead_seconds,
        catch_up_seconds=r.catch_up_seconds,
    )


@pytest.mark.parametrize("spec", ["3", "6", "heuristic", "auto"])
@pytest.mark.parametrize("machine", [GPU_LIKE, CPU_LIKE], ids=["gpu-like", "cpu-like"])
def test_speedup_estimate_is_the_true_ratio(spec, machine):
    """Where (nearly) every round drafts, the figure still divides by a measured plain cost,
    and equals the real ratio against plain decoding within 2%."""
    for seed in range(3):
        stats = Stats()
        for r in simulate(parse_policy(spec), machine, 800, seed):
            stats.add(as_round(r))
        plain = Stats()
        for r in simulate(FixedGamma(0), machine, 800, seed):
            plain.add(as_round(r))
        assert stats.plain_rounds >= 4
        true_ratio = stats.tokens_per_second / plain.tokens_per_second
        assert stats.estimated_speedup == pytest.approx(true_ratio, rel=0.02)


def test_plain_decoding_is_estimated_at_one():
    """Plain decoding takes its first token from the prompt's pass, as the loop does, and pays
    the round that chose the end-of-generation token, though that token is not counted: six
    tokens and that token are six plain decodes."""
    stats = Stats()
    stats.add(Round((7,), (False,), (), 0, 0, 0, 0.0, 0.0, 0.0002, prompt_pass=True))
    assert (
        stats.recent_tokens_per_second is None and not stats.costs.measured_widths
    )  # no decode to learn from
    for _ in range(5):
        stats.add(Round((7,), (False,), (), 0, 0, 0, 0.0, 0.010, 0.0))
    stats.add(Round((), (), (), 0, 0, 0, 0.0, 0.010, 0.0, finish_reason="stop", ended_at_eog=True))
    assert (stats.generated, stats.rounds, stats.plain_rounds) == (
        6,
        7,
        5,
    )  # the first decode is no sample
    assert stats.time_to_first_token == pytest.approx(0.0002)
    assert stats.estimated_speedup == pytest.approx(0.060 / 0.0602)


def test_no_speedup_figure_before_a_plain_round_is_measured():
    stats = Stats()
    stats.add(
        as_round(SimRound(0, 0, 0, 0.0, 0.050, 0.0))
    )  # the first round: one-time costs, not a sample
    stats.add(as_round(SimRound(4, 4, 4, 0.004, 0.012, 0.0)))
    assert (
        stats.estimated_speedup is None and stats.as_dict()["estimated_speedup_plain_rounds"] == 0
    )
    stats.add(
        as_round(SimRound(0, 0, 0, 0.0, 0.030, 0.0))
    )  # right after a draft: slower, not a sample
    assert stats.estimated_speedup is None
    stats.add(as_round(SimRound(0, 0, 0, 0.0, 0.010, 0.0)))
    assert stats.estimated_speedup == pytest.approx(8 * 0.010 / 0.106)


# --- the hybrid's auto: a policy per source, the source that pays per round ----------------


class SimLookup:
    """Prompt lookup on a text that alternates passages it can copy and passages it cannot:
    where it can, a match of up to n tokens, each right with `alpha`."""

    name, kind = "lookup", "lookup"

    def __init__(self, copying: list[bool], alpha: float = 0.9) -> None:
        self.copying = copying  # per round: whether the text there repeats earlier text
        self.alpha = alpha
        self.round = 0

    def prefill(self, ctx):
        pass

    def propose(self, ctx, n, params, rng, constraint=None):
        return Proposal([1] * n if self.copying[self.round] else [], [None] * n)


@dataclass
class SimModel:
    """A draft model (or head): its tokens carry `marker`; right with `alpha` (None: the
    machine's), each costing `t_draft` (None: the machine's)."""

    name: str = "model"
    marker: int = 2
    alpha: float | None = None
    t_draft: float | None = None
    kind = "model"

    def prefill(self, ctx):
        pass

    def propose(self, ctx, n, params, rng, constraint=None):
        return Proposal([self.marker] * n, [None] * n)


COPY_TEXT = [(i // 40) % 2 == 0 for i in range(600)]  # 40 rounds copying, 40 not, in turn


def simulate_sources(
    source, policy, machine: Machine, lookup: SimLookup, models=(SimModel(),), seed: int = 0
):
    """Rounds of `source` under `policy`: a lookup token costs nothing and is right with
    lookup.alpha; a model's token costs its t_draft and is right with its alpha."""
    rng = np.random.default_rng(seed)
    costs = {
        m.marker: (m.alpha or machine.alpha, machine.t_draft if m.t_draft is None else m.t_draft)
        for m in models
    }
    costs[1] = (lookup.alpha, 0.0)
    history = []
    for i in range(len(lookup.copying)):
        lookup.round = i
        gamma = policy.next_gamma()
        tokens = source.propose([], gamma, None, rng).tokens if gamma else []
        alpha, t_draft = costs[tokens[0]] if tokens else (0.0, 0.0)
        accepted = 0
        while accepted < len(tokens) and rng.random() < alpha:
            accepted += 1
        jitter = rng.uniform(0.97, 1.03)
        event = SimRound(
            gamma,
            len(tokens),
            accepted,
            len(tokens) * t_draft * jitter,
            machine.t_verify(len(tokens) + 1) * jitter,
            machine.overhead,
        )
        policy.observe(event)
        history.append(event)
    return throughput(history)


RARE_COPY = [(i // 40) % 5 == 0 for i in range(600)]  # one passage in five copies


@pytest.mark.parametrize(
    ("machine", "copying", "lookup_alpha"),
    [
        (replace(CPU_LIKE, alpha=0.3), COPY_TEXT, 0.9),
        # Lookup pays a little: its probes, never vetoed, keep finding that out.
        (replace(CPU_LIKE, alpha=0.3), COPY_TEXT, 0.7),
        (CPU_LIKE, RARE_COPY, 0.9),
        (GPU_LIKE, COPY_TEXT, 0.9),
        (GPU_LIKE, RARE_COPY, 0.9),
    ],
    ids=[
        "model-does-not-pay",
        "lookup-pays-a-little",
        "cpu-rare-copy",
        "gpu-like",
        "gpu-like-rare-copy",
    ],
)
def test_the_hybrids_auto_is_at_least_the_better_of_its_parts(machine, copying, lookup_alpha):
    """Where the model does not pay, the old hybrid (one α for both sources) lost what lookup
    alone gains (0.75x of it here); with a policy per source it keeps the better of the two,
    on text that alternates passages lookup can copy and passages it cannot."""

    def rate(kind: str) -> float:
        lookup = SimLookup(copying, lookup_alpha)
        if kind == "lookup":
            return simulate_sources(lookup, parse_policy("auto"), machine, lookup)
        if kind == "model":
            return simulate_sources(SimModel(), parse_policy("auto"), machine, lookup)
        hybrid = HybridDraft(lookup, [SimModel()])
        return simulate_sources(hybrid, hybrid.policy("auto"), machine, lookup)

    best_part = max(rate("lookup"), rate("model"))
    assert rate("hybrid") >= 0.97 * best_part


def test_the_hybrid_under_a_fixed_gamma_asks_lookup_first():
    lookup = SimLookup([True, False])
    hybrid = HybridDraft(lookup, [SimModel()])
    assert hybrid.policy("3").name == "fixed:3" and hybrid.choice is None
    assert hybrid.propose([], 3, None, None).tokens == [1, 1, 1]
    lookup.round = 1
    assert hybrid.propose([], 3, None, None).tokens == [2, 2, 2]


def test_with_a_model_a_head_and_lookup_the_hybrid_keeps_the_best():
    """Three sources: a draft model that is right often but costs as much as a third of a
    verify, a head that is right less often at a twentieth of the cost, and lookup on text
    that copies one passage in five. The hybrid's auto reaches at least the best of them."""
    machine = GPU_LIKE
    model = SimModel("model", 2, alpha=0.85, t_draft=0.010)
    head = SimModel("eagle3:head", 3, alpha=0.7, t_draft=0.0015)

    def rate(sources) -> float:
        lookup = SimLookup(RARE_COPY)
        if sources == ["lookup"]:
            return simulate_sources(lookup, parse_policy("auto"), machine, lookup)
        if len(sources) == 1:
            return simulate_sources(sources[0], parse_policy("auto"), machine, lookup, sources)
        hybrid = HybridDraft(lookup, sources)
        return simulate_sources(hybrid, hybrid.policy("auto"), machine, lookup, sources)

    parts = {"lookup": rate(["lookup"]), "model": rate([model]), "head": rate([head])}
    assert max(parts, key=parts.__getitem__) == "head"  # the case is not trivial
    assert rate([model, head]) >= 0.97 * max(parts.values())


def test_auto_turns_speculation_down_while_other_slots_fill_the_batch_and_back_up():
    """A CPU's verify cost grows with the batch's rows (10 ms and 3 ms a row). Alone, a drafted
    token accepted 60% of the time pays (0.6 tokens for 4 ms beats plain decoding's 13 ms a
    token); with three other slots in every batch, their rounds wait for its rows too, and
    plain decoding serves the four of them faster (4 tokens in 22 ms). The same policy follows
    the load both ways."""
    policy = AdaptiveGamma(8)
    rng = np.random.default_rng(0)

    def rounds(n: int, shared_rows: int) -> int:
        for _ in range(n):
            gamma = policy.next_gamma()
            accepted = 0
            while accepted < gamma and rng.random() < 0.6:
                accepted += 1
            width = gamma + 1 + shared_rows
            policy.observe(
                SimRound(
                    gamma,
                    gamma,
                    accepted,
                    gamma * 0.001,
                    0.010 + 0.003 * width,
                    0.0,
                    shared_rows=shared_rows,
                    shared_with=shared_rows,
                )
            )
        return policy.gamma

    assert rounds(200, shared_rows=0) >= 1  # alone
    assert rounds(200, shared_rows=3) == 0  # three other slots, a row each
    assert rounds(200, shared_rows=0) >= 1  # quiet again
