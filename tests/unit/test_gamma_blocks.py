"""auto for a block draft (DFlash, DSpark), without a model: one pass drafts the whole block,
so a round costs t_pass whatever γ, and each position of the block is accepted with its
own chance, falling with the position. Rounds are simulated from known per-position
acceptance and known costs, so the best γ is known and the policy's choices can be judged,
alone and in the hybrid beside lookup or a draft model."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from specrun.core import learned
from specrun.core.drafting import HybridDraft, Proposal, SourceChoice, gamma_shape, policy_for
from specrun.core.gamma import PER_TOKEN, AdaptiveGamma, GammaShape, parse_policy
from tests.unit.test_gamma import COPY_TEXT, GPU_LIKE, SimLookup, SimRound, throughput


@dataclass
class BlockMachine:
    """A block draft on a machine: `alphas[k]` the chance that position k + 1 is accepted
    where the positions before it were, one pass `t_pass` whatever γ, verify a + b·width."""

    alphas: list[float]
    t_pass: float
    verify_base: float
    verify_per_token: float
    overhead: float = 0.0002

    def t_verify(self, width: int) -> float:
        return self.verify_base + self.verify_per_token * width

    def expected_tokens(self, gamma: int) -> float:
        tokens = reached = 1.0
        for alpha in self.alphas[:gamma]:
            reached *= alpha
            tokens += reached
        return tokens

    def rate(self, gamma: int) -> float:
        seconds = (self.t_pass if gamma else 0.0) + self.t_verify(gamma + 1) + self.overhead
        return self.expected_tokens(gamma) / seconds

    def accepted(self, drafted: int, rng: np.random.Generator) -> int:
        accepted = 0
        while accepted < drafted and rng.random() < self.alphas[accepted]:
            accepted += 1
        return accepted

    def round(self, gamma: int, rng: np.random.Generator) -> SimRound:
        jitter = rng.uniform(0.97, 1.03)  # measured times are never exact
        return SimRound(
            gamma,
            gamma,
            self.accepted(gamma, rng),
            (self.t_pass if gamma else 0.0) * jitter,
            self.t_verify(gamma + 1) * jitter,
            self.overhead,
        )


def block_shape(machine: BlockMachine) -> GammaShape:
    return GammaShape(block=len(machine.alphas))


def simulate(policy, machine: BlockMachine, rounds: int, seed: int = 0) -> list[SimRound]:
    rng = np.random.default_rng(seed)
    history = []
    for _ in range(rounds):
        event = machine.round(policy.next_gamma(), rng)
        policy.observe(event)
        history.append(event)
    return history


# Acceptance falls off after the fourth position; on a CPU-like verify (2 ms a row) the fifth
# position brings 0.2 tokens for 2 ms, less than the 184 tokens/s that γ 4 gives.
FALLS_OFF = BlockMachine(
    [0.95, 0.92, 0.9, 0.85, 0.3, 0.25, 0.2, 0.2, 0.15, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
    t_pass=0.003,
    verify_base=0.010,
    verify_per_token=0.002,
)
# A dear pass (12 ms), the same acceptance at every position, and a GPU-like verify: once the
# pass is paid, each further position costs only its verify row.
FLAT_PASS = BlockMachine([0.8] * 15, t_pass=0.012, verify_base=0.020, verify_per_token=0.0005)


@pytest.mark.parametrize("seed", range(3))
def test_a_block_settles_where_the_next_position_stops_paying(seed):
    best = max(range(16), key=FALLS_OFF.rate)
    assert best == 4  # the case: the fifth position costs more than it brings
    policy = AdaptiveGamma(15, shape=block_shape(FALLS_OFF))
    history = simulate(policy, FALLS_OFF, 600, seed)
    settled = Counter(r.gamma for r in history[300:])
    assert settled.most_common(1)[0][0] == best
    assert throughput(history[300:]) >= 0.97 * FALLS_OFF.rate(best)
    # It learned the fall: the first four positions high, the fifth low.
    alphas = policy.positions.alphas()
    assert min(alphas[:4]) > 0.7 and alphas[4] < 0.5


@pytest.mark.parametrize("seed", range(3))
def test_a_flat_pass_drafts_longer_than_the_per_token_model_would(seed):
    """Priced per token, a pass measured at γ 4 costs a quarter of it per token, so each
    further token seems to cost that much again and auto stops short; priced per pass, a
    further position costs only its verify row, and auto drafts much longer, faster."""
    block = simulate(AdaptiveGamma(15, shape=block_shape(FLAT_PASS)), FLAT_PASS, 600, seed)
    per_token = simulate(AdaptiveGamma(15), FLAT_PASS, 600, seed)
    mean_gamma = {
        name: np.mean([r.gamma for r in history[300:]])
        for name, history in (("block", block), ("per token", per_token))
    }
    assert mean_gamma["block"] >= mean_gamma["per token"] + 3
    assert throughput(block[300:]) >= 1.1 * throughput(per_token[300:])
    assert throughput(block[300:]) >= 0.93 * max(map(FLAT_PASS.rate, range(16)))


def test_gamma_is_capped_by_the_block_and_by_gamma_max():
    assert AdaptiveGamma(15, shape=GammaShape(block=6)).gamma_max == 6
    assert AdaptiveGamma(4, shape=GammaShape(block=15)).gamma_max == 4
    policy = AdaptiveGamma(15, shape=GammaShape(block=6))
    history = simulate(policy, FLAT_PASS, 200)
    assert max(r.gamma for r in history) == 6


def test_a_block_alone_and_in_the_hybrid_gets_the_block_shaped_policy():
    block = SimBlock(FALLS_OFF)
    assert gamma_shape(block) == GammaShape(block=15)
    assert gamma_shape(SimModel()) == PER_TOKEN
    alone = learned.adaptive(policy_for(block, "auto", 8))
    assert alone is not None and alone.positions is not None and alone.gamma_max == 8
    assert learned.adaptive(policy_for(SimModel(), "auto")).positions is None
    assert policy_for(block, "3").name == "fixed:3"
    hybrid = HybridDraft(SimLookup([True]), [SimModel(), block])
    policy_for(hybrid, "auto")
    assert isinstance(hybrid.choice, SourceChoice)
    shapes = {name: p.positions is not None for name, p in hybrid.choice.policies.items()}
    assert shapes == {"lookup": False, "model": False, block.name: True}


# --- the hybrid: per round, the source with the better expected rate -----------------------


@dataclass
class SimModel:
    """A draft model or head: each token right with `alpha`, costing `t_draft`."""

    alpha: float = 0.8
    t_draft: float = 0.002
    name: str = "model"
    kind = "model"

    def prefill(self, ctx):
        pass

    def propose(self, ctx, n, params, rng, constraint=None):
        return Proposal([self] * n, [None] * n)  # each token says where it came from

    def judge(self, drafted: int, rng: np.random.Generator) -> tuple[int, float]:
        accepted = 0
        while accepted < drafted and rng.random() < self.alpha:
            accepted += 1
        return accepted, drafted * self.t_draft


class SimBlock:
    """A block draft whose rounds a BlockMachine decides: one pass, acceptance by position."""

    kind = "dflash"

    def __init__(self, machine: BlockMachine, name: str = "dflash:block") -> None:
        self.machine = machine
        self.name = name
        self.longest = len(machine.alphas)
        self.gamma_shape = GammaShape(block=self.longest)  # as BlockDraft declares it

    def prefill(self, ctx):
        pass

    def propose(self, ctx, n, params, rng, constraint=None):
        n = min(n, self.longest)
        return Proposal([self] * n, [None] * n)

    def judge(self, drafted: int, rng: np.random.Generator) -> tuple[int, float]:
        return self.machine.accepted(drafted, rng), self.machine.t_pass


class LookupSource:
    """SimLookup's matches, right with its alpha, at no cost."""

    def __init__(self, lookup: SimLookup) -> None:
        self.lookup = lookup

    def judge(self, drafted: int, rng: np.random.Generator) -> tuple[int, float]:
        accepted = 0
        while accepted < drafted and rng.random() < self.lookup.alpha:
            accepted += 1
        return accepted, 0.0


def simulate_hybrid(source, policy, machine: BlockMachine, lookup: SimLookup, seed: int = 0):
    """Rounds of `source` under `policy`; each drafted token names the source that drafted it
    (lookup's are 1s), which decides its acceptance and cost. The verify is `machine`'s.
    Returns the rounds and the source of each (None: none drafted)."""
    rng = np.random.default_rng(seed)
    history, drafters = [], []
    for i in range(len(lookup.copying)):
        lookup.round = i
        gamma = policy.next_gamma()
        tokens = source.propose([], gamma, None, rng).tokens if gamma else []
        drafter = None if not tokens else tokens[0] if tokens[0] != 1 else LookupSource(lookup)
        accepted, seconds = drafter.judge(len(tokens), rng) if drafter else (0, 0.0)
        jitter = rng.uniform(0.97, 1.03)
        event = SimRound(
            gamma,
            len(tokens),
            accepted,
            seconds * jitter,
            machine.t_verify(len(tokens) + 1) * jitter,
            machine.overhead,
        )
        policy.observe(event)
        history.append(event)
        drafters.append(getattr(drafter, "name", "lookup") if drafter else None)
    return history, drafters


NO_COPY = [False] * 600  # text lookup cannot copy: the hybrid's choice is the drafts'
GOOD_BLOCK = BlockMachine(
    [0.92, 0.9, 0.88, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.2, 0.1, 0.1],
    t_pass=0.004,
    verify_base=GPU_LIKE.verify_base,
    verify_per_token=GPU_LIKE.verify_per_token,
)
POOR_BLOCK = BlockMachine(
    [0.5, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
    t_pass=0.006,
    verify_base=GPU_LIKE.verify_base,
    verify_per_token=GPU_LIKE.verify_per_token,
)


@pytest.mark.parametrize(
    ("block_machine", "model", "better"),
    [
        (GOOD_BLOCK, SimModel(alpha=0.85, t_draft=0.002), "dflash:block"),
        (POOR_BLOCK, SimModel(alpha=0.85, t_draft=0.002), "model"),
    ],
    ids=["block-pays-more", "model-pays-more"],
)
def test_the_hybrid_drafts_with_whichever_of_a_block_and_a_model_pays_more(
    block_machine, model, better
):
    """`MODEL,dflash:X`: each source priced by its own shape, the one with the better expected
    rate drafts (and the hybrid is about as fast as the better source alone)."""

    def run(source, policy):
        return simulate_hybrid(source, policy, block_machine, SimLookup(NO_COPY))

    block = SimBlock(block_machine)
    hybrid = HybridDraft(None, [model, block])
    history, drafters = run(hybrid, policy_for(hybrid, "auto"))
    late = Counter(name for name in drafters[300:] if name)
    assert late[better] >= 0.8 * sum(late.values())
    alone = {
        "model": throughput(run(model, policy_for(model, "auto"))[0][300:]),
        "dflash:block": throughput(run(block, policy_for(block, "auto"))[0][300:]),
    }
    assert max(alone, key=alone.__getitem__) == better  # the case is what it says
    assert throughput(history[300:]) >= 0.95 * alone[better]


def test_lookup_beside_a_block_beats_both_alone():
    """`lookup,dflash:X` on text that copies a passage in two: lookup where it matches and its
    expected rate is higher, the block elsewhere, faster than either alone."""

    def rate(kind: str) -> float:
        lookup = SimLookup(COPY_TEXT, 0.95)
        block = SimBlock(GOOD_BLOCK)
        source = {"lookup": lookup, "block": block}.get(kind) or HybridDraft(lookup, [block])
        history, _ = simulate_hybrid(source, policy_for(source, "auto"), GOOD_BLOCK, lookup)
        return throughput(history)

    assert rate("hybrid") >= 1.15 * max(rate("lookup"), rate("block"))


# --- the learned state ------------------------------------------------------------------------


def trained_block_policy(machine: BlockMachine = FALLS_OFF):
    policy = parse_policy("auto", 15, block_shape(machine))
    simulate(learned.adaptive(policy), machine, 300)
    return policy


def test_a_block_policys_state_round_trips_and_drafts_from_the_first_round(tmp_path):
    path = tmp_path / "state.json"
    policy = trained_block_policy()
    learned.save(policy, path, {})
    later = parse_policy("auto", 15, block_shape(FALLS_OFF))
    assert learned.load(later, path)
    saved, resumed = learned.adaptive(policy), learned.adaptive(later)
    # Weighed as a few rounds, yet the same estimate per position.
    assert resumed.positions.alphas() == pytest.approx(saved.positions.alphas())
    history = simulate(resumed, FALLS_OFF, 20, seed=1)
    assert history[0].gamma == 4  # no warm-up: the best γ from the first round


def test_a_state_of_another_shape_or_with_bad_positions_is_not_loaded(tmp_path):
    path = tmp_path / "state.json"
    learned.save(trained_block_policy(), path, {})
    good = path.read_text()
    assert not learned.load(parse_policy("auto", 15), path)  # a per-token policy
    assert not learned.load(parse_policy("auto", 15, GammaShape(block=7)), path)
    record = json.loads(good)
    positions = record["state"]["positions"]
    broken = [
        {**record["state"], "positions": [[*positions[0][:2], float("nan")], *positions[1:]]},
        {**record["state"], "positions": [positions[0][:2], *positions[1:]]},
        {**record["state"], "positions": [[0.0, 0.0, 0.0], *positions[1:]]},
        {**record["state"], "accepted": 1.0, "rejected": 1.0},  # both shapes at once
    ]
    for state in broken:
        path.write_text(json.dumps({**record, "state": state}))
        policy = parse_policy("auto", 15, block_shape(FALLS_OFF))
        assert not learned.load(policy, path), state
        fresh = parse_policy("auto", 15, block_shape(FALLS_OFF))
        assert learned.adaptive(policy).state() == learned.adaptive(fresh).state()


def test_a_per_token_state_saved_before_block_drafts_still_loads(tmp_path):
    """The layout of a state saved before block drafts existed: one α, no positions."""
    path = tmp_path / "state.json"
    state = {
        "accepted": 6.5,
        "rejected": 1.5,
        "gamma": 4,
        "probe_interval": 8,
        "costs": {"means": {"draft": [0.002, 9], "overhead": [0.0002, 12]}, "verify": {}},
    }
    path.write_text(json.dumps({"version": learned.VERSION, "settings": {}, "state": state}))
    policy = parse_policy("auto")
    assert learned.load(policy, path)
    assert learned.adaptive(policy).alpha == pytest.approx(6.5 / 8)
    assert not learned.load(parse_policy("auto", 8, GammaShape(block=15)), path)
