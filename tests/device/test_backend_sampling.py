"""Backend sampling where the output layer is on a Vulkan device: llama.cpp's top-k sampler in
the device's graph crashed this tier (heap corruption read back as a segfault, with one model
or two, short prompts or long; and GGML_ASSERT(misalign_bytes == 0) on a vocabulary whose rows
are not 16-byte multiples), so specrun keeps whole rows there: `auto` chooses them, `on` is
refused in one line, and the CPU's chain still serves a model left on the CPU."""

from __future__ import annotations

import pytest

from specrun.errors import SpecrunError
from specrun.llama.model import Model
from tests.support.cli import specrun

PROMPT = "the cat and the dog in the big red road"


def test_auto_keeps_whole_rows_on_the_vulkan_device(tiny_target):
    with Model(tiny_target, n_ctx=256, gpu_layers=99) as offloaded:
        assert offloaded.offloaded_layers == 2 and not offloaded.samples_on_device
        rows = offloaded.logits(offloaded.tokenize(PROMPT), 3, top=8)
        assert rows.shape == (3, offloaded.n_vocab)  # whole rows, whatever `top` asks
    with Model(tiny_target, n_ctx=256, gpu_layers=0, backend_sampling="on") as on_cpu:
        assert on_cpu.samples_on_device  # the CPU backend's chain, where nothing is offloaded


def test_on_is_refused_in_one_line_on_the_vulkan_device(tiny_target):
    with pytest.raises(SpecrunError, match="crash on Vulkan devices"):
        Model(tiny_target, n_ctx=256, gpu_layers=99, backend_sampling="on")
    done = specrun(
        "run", "-t", str(tiny_target), "--gpu-layers", "99", "--backend-sampling", "on", PROMPT
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and lines[-1].startswith("specrun: error: target.gguf: "), lines
    assert "--backend-sampling off or auto" in lines[-1]
    assert not any("Traceback" in line or "ggml_vulkan" in line for line in lines), lines
