"""The GPU kit (bench/gpu/kit.sh) in its functional mode on the device: the tiny shapes with
every layer on the installed build's GPU, each stage through, the figures recorded as the
device's. Its timings on a software device mean nothing; that it runs end to end does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "kit.sh"
KIT_SECONDS = 800


def test_the_kit_measures_every_target_on_the_device(tmp_path: Path, vulkan) -> None:
    env = dict(
        os.environ,
        KIT_WORK=str(tmp_path / "work"),
        OUT=str(tmp_path / "out"),
        PYTHON=sys.executable,
        KIT_SECONDS=str(KIT_SECONDS - 60),
    )
    done = subprocess.run(
        [str(KIT), "run", "--cpu", "--installed", "--offload"],
        env=env,
        capture_output=True,
        text=True,
        timeout=KIT_SECONDS,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["machine"]["gpu"] == vulkan.description
    assert results["machine"]["device"] == "Vulkan" and "Vulkan" in results["machine"]["backends"]
    targets = results["targets"]
    # The EAGLE-3 head and the F16 target are left out on a device (bench/gpu/kit.sh says why).
    assert list(targets) == ["tiny-q4_k_m", "tiny-mtp-q4_k_m"]
    assert [list(t["drafts"]) for t in targets.values()] == [["model"], ["mtp"]]
    for target in targets.values():
        assert target["backend_sampling"] is False  # auto: whole rows on a Vulkan device
        assert target["specrun_plain"]["generated"] == 32
        for draft in target["drafts"].values():
            assert draft["specrun_fixed"]["generated"] == 32
    assert (
        f"# specrun GPU kit: {vulkan.description}, driver Vulkan ({vulkan.name})"
        in (tmp_path / "out" / "results.md").read_text()
    )
