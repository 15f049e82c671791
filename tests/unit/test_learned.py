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


def test_load_ignores_a_missing_corrupt_or_foreign_state(tmp_path):
    path = tmp_path / "state.json"
    assert not learned.load(parse_policy("auto"), path)
    path.write_text("{not json")
    assert not learned.load(parse_policy("auto"), path)
    path.write_text(json.dumps({"version": learned.VERSION + 1, "state": {}}))
    assert not learned.load(parse_policy("auto"), path)
    assert not learned.load(parse_policy("3"), path)  # only auto learns


def trained_record() -> dict:
    policy = parse_policy("auto")
    simulate(learned.adaptive(policy), GPU_LIKE, 200)
    return {"version": learned.VERSION, "settings": {}, "state": policy.policy.state()}


def test_a_saved_state_round_trips(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(trained_record()))
    assert learned.load(parse_policy("auto"), path)


def test_load_refuses_states_with_non_finite_numbers_or_unknown_keys(tmp_path):
    path = tmp_path / "state.json"
    good = json.dumps(trained_record())
    state = json.loads(good)["state"]
    width = next(iter(state["costs"]["verify"]))
    broken = [
        good.replace(f'"accepted": {state["accepted"]}', '"accepted": NaN'),
        good.replace(f'"accepted": {state["accepted"]}', '"accepted": 1e999'),  # inf
        good.replace('"overhead": [', '"overhead": [Infinity, 1], "x": ['),
        good.replace(f'"{width}": [', '"0": ['),  # no verify is zero positions wide
        good.replace('"gamma": ', '"gamma": -'),
        good.replace('"probe_interval"', '"unknown": 1, "probe_interval"'),
        good.replace('"means"', '"mean"'),
    ]
    for text in broken:
        assert text != good
        path.write_text(text)
        policy = parse_policy("auto")
        assert not learned.load(policy, path), text
        assert policy.policy.state() == parse_policy("auto").policy.state()  # left fresh


def test_a_state_with_nan_is_not_saved(tmp_path):
    path = tmp_path / "state.json"
    policy = parse_policy("auto")
    simulate(learned.adaptive(policy), GPU_LIKE, 200)
    learned.save(policy, path, {})
    assert learned.load(parse_policy("auto"), path)
    path.unlink()
    policy.policy._accepted = float("nan")  # what a bug upstream would leave
    learned.save(policy, path, {})
    assert not path.exists()
