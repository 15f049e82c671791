"""What `auto` learned about a target and draft on this machine, kept between runs.

Each new process would otherwise pay auto's warm-up again: plain rounds, then drafts
tried only to measure their cost and acceptance. A script that runs `specrun run` once
per file pays it on every file. So an engine saves its policy's state when it closes, and
the next engine for the same pair and settings starts from it. The state is a starting
point weighed as a few rounds of evidence (AdaptiveGamma.resume), so a run whose text or
machine load differs corrects it within a few rounds.

Kept in specrun's state folder (`specrun.system.paths`: ~/.local/state/specrun/auto on
Linux), one small JSON file per pair and settings; deleting the folder makes auto start
afresh.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeGuard

from specrun.core.costs import MEANS
from specrun.core.gamma import AdaptiveGamma, AdaptiveState, GammaPolicy
from specrun.system import paths

VERSION = 1  # of the saved state's layout: another layout is ignored, not misread


def state_dir() -> Path:
    return paths.state_dir() / "auto"


def file_identity(path: Path) -> list[object]:
    """The file as it is now: replacing or rewriting it gives another identity."""
    status = path.stat()
    return [str(path.resolve()), status.st_size, status.st_mtime_ns]


def path_for(settings: dict[str, object]) -> Path:
    """Where the state for these settings lives: everything that changes the costs or the
    acceptance (the files, threads, GPU layers, γ_max, the llama.cpp build) is in the key."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return state_dir() / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"


def adaptive(policy: GammaPolicy) -> AdaptiveGamma | None:
    """The AdaptiveGamma inside a policy (PlainSamples wraps it), if any."""
    inner = getattr(policy, "policy", policy)
    return inner if isinstance(inner, AdaptiveGamma) else None


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} in a saved state")


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _amount(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _measures(table: object, known: Callable[[str], bool]) -> bool:
    """{key: [value, samples]}: known keys, finite non-negative values, a sample or more."""
    return isinstance(table, dict) and all(
        isinstance(key, str)
        and known(key)
        and isinstance(pair, list)
        and len(pair) == 2
        and _amount(pair[0])
        and pair[0] >= 0
        and _count(pair[1])
        and pair[1] >= 1
        for key, pair in table.items()
    )


def _evidence(counts: object, size: int) -> bool:
    """`size` finite non-negative numbers, not all zero (an estimate divides by their sum)."""
    return (
        isinstance(counts, list)
        and len(counts) == size
        and all(_amount(count) and count >= 0 for count in counts)
        and sum(counts) > 0
    )


def _acceptance(state: dict[str, object]) -> bool:
    """One α's evidence (accepted, rejected), or a block draft's per position (GammaShape):
    [accepted, rejected, prior weight] each."""
    if "positions" in state:
        positions = state["positions"]
        return (
            "accepted" not in state
            and "rejected" not in state
            and isinstance(positions, list)
            and all(_evidence(counts, 3) for counts in positions)
        )
    return "accepted" in state and _evidence([state["accepted"], state.get("rejected")], 2)


def is_valid_state(state: object) -> TypeGuard[AdaptiveState]:
    """Every key known and every number finite and in range: a state that a bug, a disk
    error or a hand edit left with NaN would otherwise steer auto, and be saved back.
    A state saved before block drafts (one α, no positions) is still one."""
    if not isinstance(state, dict) or not (
        AdaptiveState.__required_keys__ <= set(state) <= set(AdaptiveState.__annotations__)
    ):
        return False
    costs = state["costs"]
    return (
        _acceptance(state)
        and _count(state["gamma"])
        and _count(state["probe_interval"])
        and state["probe_interval"] >= 1
        and isinstance(costs, dict)
        and set(costs) == {"means", "verify"}
        and _measures(costs["means"], MEANS.__contains__)
        and _measures(costs["verify"], lambda key: key.isdigit() and int(key) >= 1)
    )


def load(policy: GammaPolicy, path: Path) -> bool:
    """Resume an adaptive policy from its saved state; False where there is none to use."""
    auto = adaptive(policy)
    if auto is None:
        return False
    try:
        saved = json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    except (OSError, ValueError):
        return False  # none yet, or unreadable: the warm-up measures afresh
    if not isinstance(saved, dict) or saved.get("version") != VERSION:
        return False
    state = saved.get("state")
    if not is_valid_state(state) or not auto.fits(state):
        return False  # a damaged state, or one of another shape (GammaShape)
    auto.resume(state)
    return True


def save(policy: GammaPolicy, path: Path, settings: dict[str, object]) -> None:
    """Save an adaptive policy's state once it has measured something; a read-only home
    only costs the next run its warm-up."""
    auto = adaptive(policy)
    if auto is None or auto.costs.t_overhead is None:
        return
    state = auto.state()
    if not is_valid_state(json.loads(json.dumps(state))):
        return  # never leave a state that the next run would refuse
    record = {"version": VERSION, "settings": settings, "state": state}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(record, default=str), encoding="utf-8")
        partial.replace(path)  # whole or not at all, even with two runs closing at once
    except OSError:
        pass
