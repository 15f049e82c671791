"""The device tier: the paths only a GPU takes, run on a real GPU backend of llama.cpp.

`make test-device` runs it with the Vulkan build of llama-cpp-python (.venv-vulkan) on the
first Vulkan device; on a machine without a GPU that is Mesa's lavapipe, a software Vulkan
device that ggml takes when GGML_VK_VISIBLE_DEVICES names it. It is a separate device with
its own buffers, memory report, op support and scheduler splits, which is what these paths
need to meet; it is slow, so the tier uses the tiny models and asserts no timing.

The CPU build stays the reference: `SPECRUN_CPU_PYTHON` (set by the Makefile) is the CPU
environment's interpreter, and `cpu_reference` runs the same decoding there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specrun.llama.devices import Device, build_info, gpu_devices

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_SECONDS = 300


def pytest_configure(config: pytest.Config) -> None:
    if "Vulkan" not in build_info().backends:
        raise pytest.UsageError(
            "tests/device needs the Vulkan build of llama-cpp-python: run `make test-device`"
        )
    if not any(device.backend == "Vulkan" for device in gpu_devices()):
        raise pytest.UsageError(
            "tests/device: the Vulkan build sees no device; without a GPU, Mesa's lavapipe "
            "(mesa-vulkan-drivers) with GGML_VK_VISIBLE_DEVICES=0 stands in (`make test-device`)"
        )


@pytest.fixture
def vulkan() -> Device:
    """The device the tier runs on ("Vulkan0"), with its memory as it reports it now."""
    return next(device for device in gpu_devices() if device.backend == "Vulkan")


def cpu_environment() -> dict[str, str]:
    """This environment without the Vulkan device's selection, for the CPU build's processes."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GGML_VK")}


def cpu_python() -> str:
    python = os.environ.get("SPECRUN_CPU_PYTHON") or str(ROOT / ".venv" / "bin" / "python")
    if not Path(python).exists():
        pytest.fail(f"no CPU build's interpreter at {python}: set SPECRUN_CPU_PYTHON")
    return python


@pytest.fixture(scope="session")
def cpu_reference():
    """`cpu_reference(request)`: tests/device/reference.py's answer from the CPU build."""

    def run(request: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run(
            [cpu_python(), "-m", "tests.device.reference"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=REFERENCE_SECONDS,
            cwd=ROOT,
            env=cpu_environment(),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        answer: dict[str, Any] = json.loads(done.stdout)
        assert "Vulkan" not in answer["backends"], "the reference ran on the Vulkan build"
        return answer

    return run
