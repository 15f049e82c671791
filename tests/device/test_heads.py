"""EAGLE-3 heads and MTP layers drafting for a target on the device: the hidden rows a head
reads come back from the device's buffers as the CPU computes them, and greedy output with
the head is plain decoding's, the head's drafts taken in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specrun.core.loop import Round
from specrun.engine import Engine
from specrun.llama.model import Model
from specrun.options import MTP_LAYERS, DraftOptions, Eagle3Head, LoadOptions
from tests.support.identity import GREEDY, greedy_tokens
from tests.support.tinymodels import write_tiny_eagle3_head, write_tiny_mtp_model

PROMPT = "the cat and the dog in the big red road"
ON_DEVICE = LoadOptions(n_ctx=256, gpu_layers=99, fit=False)


@pytest.fixture(scope="module")
def mtp_target(tiny_dir: Path) -> Path:
    return write_tiny_mtp_model(tiny_dir / "mtp-device.gguf")


@pytest.fixture(scope="module")
def eagle3(tiny_dir: Path) -> Eagle3Head:
    return Eagle3Head(write_tiny_eagle3_head(tiny_dir / "head-device.gguf"))


@pytest.mark.parametrize("layers", [(0, 1, 1), ()], ids=["eagle3 layer inputs", "mtp last state"])
def test_hidden_rows_read_back_from_the_device_are_the_cpus(tiny_target, mtp_target, layers):
    path = tiny_target if layers else mtp_target
    rows = {}
    for gpu_layers in (0, 99):
        with Model(path, n_ctx=256, gpu_layers=gpu_layers, load_mtp=not layers) as target:
            assert target.offloaded_layers == (2 if gpu_layers else 0)
            [hidden] = target.keep_hidden(layers)
            seq = target.tokenize(PROMPT)
            target.logits(seq, 1)
            target.logits([*seq, 7, 9], 3)  # a second pass: rows appended after the first's
            rows[gpu_layers] = hidden.rows(0, len(seq) + 2).copy()
    assert rows[99].shape == rows[0].shape and np.abs(rows[0]).max() > 0
    np.testing.assert_allclose(rows[99], rows[0], atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_greedy_with_a_head_on_a_device_target_is_plain_decoding(
    kind, tiny_target, mtp_target, eagle3
):
    target_path, draft = (tiny_target, eagle3) if kind == "eagle3" else (mtp_target, MTP_LAYERS)
    with Model(target_path, n_ctx=256, gpu_layers=99) as plain:
        prompt = plain.tokenize(PROMPT)
        expected, _ = greedy_tokens(plain, prompt, max_tokens=40)
    with Engine.load(
        target_path, draft, options=ON_DEVICE, drafting=DraftOptions(gamma="3")
    ) as engine:
        assert engine.placement().device == "Vulkan" and engine.head is not None
        rounds = [
            e for e in engine.stream(prompt, max_tokens=40, params=GREEDY) if isinstance(e, Round)
        ]
        assert [t for r in rounds for t in r.tokens] == expected
        assert sum(r.drafted for r in rounds) > 0  # the head drafted from the device's rows
