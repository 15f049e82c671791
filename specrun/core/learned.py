"""What `auto` learned about a target and draft on this machine, kept between runs.

Each new process would otherwise pay auto's warm-up again: plain rounds, then drafts
tried only to measure their cost and acceptance. A script that runs `specrun run` once
per file pays it on every file. So an engine saves its policy's state when it closes, and
the next engine for the same pair and settings starts from it. The state is a starting
point weighed as a few rounds of evidence (AdaptiveGamma.resume), so a run whose text or
machine load differs corrects it within a few rounds.

Kept in $XDG_STATE_HOME/specrun/auto (else ~/.local/state/specrun/auto), one small JSON
file per pair and settings; deleting the folder makes auto start afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from specrun.core.gamma import AdaptiveGamma, GammaPolicy

VERSION = 1  # of the saved state's layout: another layout is ignored, not misread


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "specrun" / "auto"


def file_identity(path: Path) -> list[object]:
    """The file as it is now: replacing or rewriting it gives another identity."""
    status = path.stat()
    return [str(path.resolve()), status.st_size, status.st_mtime_ns]


def state_path(settings: dict[str, object]) -> Path:
    """Where the state for these settings lives: everything that changes the costs or the
    acceptance (the files, threads, GPU layers, γ_max, the llama.cpp build) is in the key."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return state_dir() / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"


def adaptive(policy: GammaPolicy) -> AdaptiveGamma | None:
    """The AdaptiveGamma inside a policy (PlainSamples wraps it), if any."""
    inner = getattr(policy, "policy", policy)
    return inner if isinstance(inner, AdaptiveGamma) else None


def recall(policy: GammaPolicy, path: Path) -> bool:
    """Resume an adaptive policy from its saved state; False where there is none to use."""
    auto = adaptive(policy)
    if auto is None:
        return False
    try:
        saved = json.loads(path.read_text())
        if saved.get("version") != VERSION:
            return False
        auto.resume(saved["state"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return False  # none yet, or unreadable: the warm-up measures afresh
    return True


def keep(policy: GammaPolicy, path: Path, settings: dict[str, object]) -> None:
    """Save an adaptive policy's state once it has measured something; a read-only home
    only costs the next run its warm-up."""
    auto = adaptive(policy)
    if auto is None or auto.costs.t_overhead is None:
        return
    record = {"version": VERSION, "settings": settings, "state": auto.state()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(record, default=str))
        partial.replace(path)  # whole or not at all, even with two runs closing at once
    except OSError:
        pass
