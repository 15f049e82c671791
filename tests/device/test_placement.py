"""Placement and doctor on a real device: what `--gpu-layers` auto (the fit) decides from the
free memory the Vulkan device reports, the one-line refusal of a model that cannot fit the
device and the system together, and doctor naming the device and its memory."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from specrun.engine import Engine
from specrun.llama.devices import system_memory_available
from specrun.llama.footprint import estimate
from specrun.llama.placement import MARGIN, gigabytes, gpu_bytes, plan_layers
from specrun.options import LoadOptions
from tests.support.cli import specrun
from tests.support.synthetic_headers import (
    llama_8b_q4_k_m,
    llama_70b_q4_k_m,
    write_header,
)

COMMAND_SECONDS = 300


def run(*args: str) -> subprocess.CompletedProcess:
    done = specrun(*args, timeout=COMMAND_SECONDS)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_the_fit_puts_a_small_pair_wholly_on_the_device(tiny_target, tiny_draft, vulkan):
    lines: list[str] = []
    with Engine.load(
        tiny_target, tiny_draft, options=LoadOptions(n_ctx=512), announce=lines.append
    ) as engine:
        where = engine.placement()
        assert where.device == "Vulkan" and where.gpu_layers == ("2/2", "2/2")
        assert where.plan is not None and where.plan.target_layers == 3  # the output layer too
        # lavapipe reports its whole heap free whatever is loaded: nothing measured, said so.
        software = "llvmpipe" in vulkan.description
        assert (where.gpu_bytes_measured is None) == software, where.gpu_bytes_measured
    free = f"{gigabytes(vulkan.free_bytes)} of {gigabytes(vulkan.total_bytes)} GB free"
    assert lines == [f"target: 2/2 layers on {vulkan.name} ({free}); draft: 2/2 on {vulkan.name}"]


def test_layers_asked_for_are_said_as_loaded_not_as_fitted(tiny_target, tiny_draft):
    """--gpu-layers wins over the fit, and the line says what was loaded (it said the fit's)."""
    lines: list[str] = []
    options = LoadOptions(n_ctx=512, gpu_layers=0)
    with Engine.load(tiny_target, tiny_draft, options=options, announce=lines.append) as engine:
        assert engine.placement().gpu_layers == ("0/2", "2/2")
    assert lines == ["layers as asked: Vulkan, GPU layers 0/2 + 2/2"]


def test_a_model_larger_than_the_device_is_split_by_its_free_memory(tmp_path: Path, vulkan):
    """An 8B Q4_K_M (4.9 GB of weights) on a device with a few GB: the last layers that fit
    its free memory, less the margin, and the rest on the CPU."""
    path = write_header(tmp_path / "llama-8b-q4_k_m.gguf", *llama_8b_q4_k_m())
    plan = plan_layers(path, None, n_ctx=4096)
    assert plan is not None
    budget = vulkan.free_bytes - MARGIN
    model = estimate(path, n_ctx=4096)
    assert 0 < plan.target_layers < model.n_layer
    assert gpu_bytes(model, plan.target_layers) <= budget < gpu_bytes(model, plan.target_layers + 1)
    on_cpu = model.n_layer - plan.target_layers
    assert plan.line.startswith(f"target: {plan.target_layers}/32 layers on {vulkan.name} (")
    assert plan.line.endswith(f", {on_cpu} on CPU")


def test_a_model_that_cannot_fit_is_refused_in_one_line_before_it_loads(tmp_path: Path):
    """A 70B Q4_K_M (42.5 GB) on a device of a few GB and this machine's memory: refused by the
    placement, before llama.cpp reads a byte (the file is its header alone)."""
    path = write_header(tmp_path / "llama-70b-q4_k_m.gguf", *llama_70b_q4_k_m())
    if estimate(path, n_ctx=4096).total < system_memory_available():
        pytest.skip("this machine's memory holds a 70B model")
    done = run("run", "-t", str(path), "-n", "1", "hi")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith("specrun: error: llama-70b-q4_k_m.gguf needs ")
    assert "GB of system memory beyond the GPUs" in lines[0] and "--ctx" in lines[0]


def test_doctor_names_the_vulkan_device_and_its_memory(vulkan):
    report = json.loads(run("doctor", "--json").stdout)
    assert "Vulkan" in report["build"]["backends"]
    (listed,) = [d for d in report["devices"] if d["name"] == vulkan.name]
    assert listed["backend"] == "Vulkan" and listed["kind"] == "GPU"
    assert listed["description"] == vulkan.description and listed["total_bytes"] > 0
    assert report["demo_placement"] == {} or vulkan.name in report["demo_placement"]["fit"]
    text = run("doctor").stdout
    assert f"{vulkan.name:<10} GPU  Vulkan: {vulkan.description}" in text
    if "llvmpipe" in vulkan.description:  # Mesa's software device, as in CI
        assert any("software Vulkan device" in p["problem"] for p in report["problems"])
