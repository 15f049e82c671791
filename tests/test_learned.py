"""auto's state kept between engines: a new run on the same pair and settings starts where
the last stopped, without the warm-up, and still follows the text in front of it."""

from __future__ import annotations

import json

from identity import GREEDY
from test_gamma import GPU_LIKE, HARD, SAME_MODEL, Machine, simulate

from specrun.core import learned
from specrun.core.gamma import AdaptiveGamma, parse_policy
from specrun.engine import Engine
from specrun.options import DraftOptions, LoadOptions


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


def test_engines_leave_their_state_to_the_next_with_the_same_settings(
    tiny_target, tiny_draft, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # no state from other tests

    def load(threads: int) -> Engine:
        return Engine.load(
            tiny_target, tiny_draft, options=LoadOptions(threads=threads), params=GREEDY
        )

    with load(1) as first:
        assert first.learned is not None and not first.recalled
        path = first.learned
        text = "".join(getattr(e, "text", "") for e in first.stream("the cat", max_tokens=24))
    saved = json.loads(path.read_text())
    assert saved["version"] == learned.VERSION and saved["state"]["costs"]["verify"]
    with load(1) as second:
        assert second.learned == path and second.recalled
        assert (
            "".join(getattr(e, "text", "") for e in second.stream("the cat", max_tokens=24)) == text
        )
    with load(2) as other:  # other threads: other costs, another state
        assert other.learned != path and not other.recalled
    with Engine.load(
        tiny_target, tiny_draft, params=GREEDY, drafting=DraftOptions(gamma="3")
    ) as fixed:
        assert not fixed.recalled  # a fixed γ learns nothing and recalls nothing
