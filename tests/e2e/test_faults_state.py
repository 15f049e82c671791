"""State files a run reads back: a learned state left with NaN is neither used nor kept."""

from __future__ import annotations

import json
import math

from tests.support.cli import specrun


def test_a_learned_state_with_nan_is_replaced_not_kept(tiny_target, tiny_draft, tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path)}
    run = ("run", "-t", str(tiny_target), "-d", str(tiny_draft), "--threads", "1")
    run += ("--temp", "0", "-n", "24", "--json", "the cat")
    first = specrun(*run, env=env)
    assert first.returncode == 0, first.stderr
    (path,) = (tmp_path / "specrun" / "auto").glob("*.json")
    record = json.loads(path.read_text())
    record["state"]["accepted"] = math.nan
    path.write_text(json.dumps(record))  # NaN, as Python's json writes it
    second = specrun(*run, env=env)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["text"] == json.loads(first.stdout)["text"]
    kept = json.loads(path.read_text(), parse_constant=refuse)
    assert math.isfinite(kept["state"]["accepted"]) and kept["state"]["accepted"] > 0


def refuse(name: str) -> object:
    raise AssertionError(f"the state kept {name}")
