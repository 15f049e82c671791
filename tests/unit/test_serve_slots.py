"""`serve --parallel`'s default: four slots where their KV caches fit in the memory free,
fewer where they would not, with every setting (reproducible decoding and heads included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specrun.cli import serve
from specrun.cli.options import ModelChoice
from specrun.llama import devices
from specrun.llama.footprint import estimate
from specrun.options import MTP_LAYERS, LoadOptions


@pytest.fixture
def free(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The memory free, as the default reads it: set by each test."""
    memory = {"bytes": 0}
    monkeypatch.setattr(devices, "system_memory_available", lambda: memory["bytes"])
    monkeypatch.setattr(devices, "gpu_free_bytes", lambda: 0)
    return memory


def test_as_many_slots_as_their_kv_caches_fit(tiny_target: Path, free: dict[str, int]):
    choice = ModelChoice(tiny_target, None)
    footprint = estimate(tiny_target, n_ctx=1024)
    load = LoadOptions(n_ctx=1024)
    free["bytes"] = footprint.for_sequences(4).total
    assert serve.default_slots([choice], load)[0] == 4
    free["bytes"] = footprint.for_sequences(3).total
    slots, why = serve.default_slots([choice], load)
    assert slots == 3 and "3 slots (--parallel) of 1024 tokens" in why
    free["bytes"] = 0  # nothing fits: one slot, and loading will say what does not
    assert serve.default_slots([choice], load)[0] == 1


def test_reproducible_decoding_and_heads_take_as_many_slots(
    tiny_target: Path, free: dict[str, int]
):
    """Neither decodes one sequence at a time any more (DESIGN.md, Slots): the default holds."""
    free["bytes"] = 1 << 40
    for choice, load in (
        (ModelChoice(tiny_target, None), LoadOptions(reproducible=True)),
        (ModelChoice(tiny_target, MTP_LAYERS), LoadOptions()),
    ):
        slots, why = serve.default_slots([choice], load)
        assert slots == serve.DEFAULT_SLOTS > 1 and "slots (--parallel)" in why
