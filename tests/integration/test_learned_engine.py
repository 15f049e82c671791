"""auto's learned state between engines of the same pair and settings (specrun.core.learned)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specrun.core import learned
from specrun.engine import Engine
from specrun.options import DraftOptions, LoadOptions
from specrun.system.cpus import usable_cpus
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


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="measured from Linux's /proc/stat")
def test_what_a_busy_machine_taught_is_not_kept(demo_pair, tmp_path, monkeypatch):
    """Costs measured while other programs held the CPUs would keep auto from drafting in
    every later run with the same settings (its probes judged by them): not saved."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    cpus = len(usable_cpus())
    spin = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(cpus)]
    try:
        with Engine.load(*demo_pair, options=LoadOptions(threads=cpus), params=GREEDY) as busy:
            path = busy.learned_path
            # Until a generation lasted long enough to be judged (1 s): on a fast CPU 16 tokens
            # took less, five times over.
            for _ in range(10):
                for _ in busy.stream("Why is the sky blue?", max_tokens=64):
                    pass
                if busy.contention is not None:
                    break
            assert busy.contention is not None and busy.contention.slowed, busy.contention
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=60)
    assert path is not None and not path.exists()
