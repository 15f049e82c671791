"""`serve --parallel`'s default: four slots where their KV caches fit in the memory free,
fewer where they would not, one where a setting decodes one sequence at a time."""

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


def test_one_slot_where_a_setting_decodes_one_sequence_at_a_time(
    tiny_target: Path, free: dict[str, int]
):
    free["bytes"] = 1 << 40
    reproducible = serve.default_slots(
        [ModelChoice(tiny_target, None)], LoadOptions(reproducible=True)
    )
    assert reproducible == (1, "one slot: --reproducible decodes one sequence at a time")
    mtp = serve.default_slots([ModelChoice(tiny_target, MTP_LAYERS)], LoadOptions())
    assert mtp[0] == 1 and "MTP" in mtp[1]
