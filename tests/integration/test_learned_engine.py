"""auto's learned state between engines of the same pair and settings (specrun.core.learned)."""

from __future__ import annotations

import json

from specrun.core import learned
from specrun.engine import Engine
from specrun.options import DraftOptions, LoadOptions
from tests.support.identity import GREEDY


def test_engines_leave_their_state_to_the_next_with_the_same_settings(
    tiny_target, tiny_draft, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # no state from other tests

    def load(threads: int) -> Engine:
        return Engine.load(
            tiny_target, tiny_draft, options=LoadOptions(threads=threads), params=GREEDY
        )

    with load(1) as first:
        assert first.learned_path is not None and not first.recalled
        path = first.learned_path
        text = "".join(getattr(e, "text", "") for e in first.stream("the cat", max_tokens=24))
    saved = json.loads(path.read_text())
    assert saved["version"] == learned.VERSION and saved["state"]["costs"]["verify"]
    with load(1) as second:
        assert second.learned_path == path and second.recalled
        assert (
            "".join(getattr(e, "text", "") for e in second.stream("the cat", max_tokens=24)) == text
        )
    with load(2) as other:  # other threads: other costs, another state
        assert other.learned_path != path and not other.recalled
    with Engine.load(
        tiny_target, tiny_draft, params=GREEDY, drafting=DraftOptions(gamma="3")
    ) as fixed:
        assert not fixed.recalled  # a fixed γ learns nothing and recalls nothing
