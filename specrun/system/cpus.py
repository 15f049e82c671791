"""How many CPU threads llama.cpp gets: by default one per physical core this process may use.

llama.cpp's threads spin while they wait for each other at every step, so threads
beyond the physical cores (hyper-threads, or cores that other programs keep busy)
slow a generation down instead of speeding it up.
"""

from __future__ import annotations

import os
from pathlib import Path

_TOPOLOGY = Path("/sys/devices/system/cpu")


def usable_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Physical cores among the usable CPUs: distinct (package, core) pairs in Linux's
    CPU topology; elsewhere, or where it cannot be read, the logical CPU count."""
    cpus = usable_cpus()
    cores = set()
    try:
        for cpu in cpus:
            topology = _TOPOLOGY / f"cpu{cpu}" / "topology"
            cores.add(
                ((topology / "physical_package_id").read_text(), (topology / "core_id").read_text())
            )
    except OSError:
        return len(cpus)
    return len(cores) or len(cpus)


def choose_threads(requested: int | None) -> tuple[int, str | None]:
    """The thread count to use and, where it differs from the request, why."""
    if requested is None:
        return physical_cores(), None
    available = len(usable_cpus())
    if requested > available:
        return (
            available,
            f"`threads` {requested} is more than the {available} CPUs available; using {available}",
        )
    return requested, None
