"""auto's state kept between engines: a new run on the same pair and settings starts where
the last stopped, without the warm-up, and still follows the text in front of it."""

from __future__ import annotations

import json

from specrun.core import learned
from specrun.core.gamma import AdaptiveGamma, parse_policy
from tests.unit.test_gamma import GPU_LIKE, HARD, SAME_MODEL, Machine, simulate


def resumed(trained_on, rounds: int = 300) -> AdaptiveGamma:
    earlier = AdaptiveGamma(8)
    simulate(earlier, trained_on, rounds)
    later = AdaptiveGamma(8)
    later.resume(json.loads(json.dumps(earlier.state())))  # as saved to and read from a file
    return later


def test_a_resumed_policy_skips_the_warm_up_where_speculation_does_not_pay():
    history = simulate(resumed(SAME_MODEL), SAME_MODEL, 100, seed=1)
    assert all(r.gamma == 0 for r in history)  # fresh, it drafts in its warm-up (test_gamma)


def test_a_resumed_policy_drafts_from_the_first_round_where_speculation_pays():
    best = max(range(9), key=GPU_LIKE.rate)
    history = simulate(resumed(GPU_LIKE), GPU_LIKE, 20, seed=1)
    assert history[0].gamma >= 2 and GPU_LIKE.rate(history[0].gamma) >= 0.95 * GPU_LIKE.rate(best)


def test_a_resumed_state_weighs_a_few_rounds_so_a_different_text_shows_soon():
    easy = Machine(
        alpha=0.9, t_draft=0.001, verify_base=0.010, verify_per_token=0.001
    )  # HARD's costs
    policy = resumed(easy)
    assert policy.next_gamma() >= 3
    history = simulate(policy, HARD, 60, seed=2)  # acceptance falls from 0.9 to 0.1
    assert all(r.gamma <= 1 for r in history[15:])


def test_recall_ignores_a_missing_corrupt_or_foreign_state(tmp_path):
    path = tmp_path / "state.json"
    assert not learned.recall(parse_policy("auto"), path)
    path.write_text("{not json")
    assert not learned.recall(parse_policy("auto"), path)
    path.write_text(json.dumps({"version": learned.VERSION + 1, "state": {}}))
    assert not learned.recall(parse_policy("auto"), path)
    assert not learned.recall(parse_policy("3"), path)  # only auto learns
