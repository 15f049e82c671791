"""How many CPU threads llama.cpp gets: by default one per physical core this process may use.

llama.cpp's threads spin while they wait for each other at every step, so threads
beyond the physical cores (hyper-threads, or cores that other programs keep busy)
slow a generation down instead of speeding it up. The cores are counted as llama.cpp
counts them: Linux's CPU topology; on macOS the performance cores (`hw.perflevel0`, as
Apple silicon's efficiency cores would hold the others up), else all physical ones; on
Windows the processor cores GetLogicalProcessorInformationEx lists.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys
from pathlib import Path

_TOPOLOGY = Path("/sys/devices/system/cpu")
_RELATION_PROCESSOR_CORE = 0  # <winnt.h> LOGICAL_PROCESSOR_RELATIONSHIP


def usable_cpus() -> list[int]:
    """The logical CPUs this process may run on (its affinity, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Physical cores among the usable CPUs; where they cannot be read, the logical CPU count."""
    cpus = usable_cpus()
    if sys.platform == "darwin":
        cores = _sysctl_count("hw.perflevel0.physicalcpu") or _sysctl_count("hw.physicalcpu")
    elif sys.platform == "win32":
        cores = _windows_cores()
    else:
        cores = _linux_cores(cpus)
    return min(cores, len(cpus)) if cores else len(cpus)


def _linux_cores(cpus: list[int]) -> int | None:
    """Distinct (package, core) pairs in Linux's CPU topology."""
    cores = set()
    try:
        for cpu in cpus:
            topology = _TOPOLOGY / f"cpu{cpu}" / "topology"
            cores.add(
                ((topology / "physical_package_id").read_text(), (topology / "core_id").read_text())
            )
    except OSError:
        return None
    return len(cores)


def _sysctl_count(name: str) -> int | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        value, size = ctypes.c_int(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int))
        found = libc.sysctlbyname(name.encode(), ctypes.byref(value), ctypes.byref(size), None, 0)
    except (OSError, AttributeError):  # no libc, or no sysctlbyname in it
        return None
    return value.value if found == 0 and value.value > 0 else None


def _windows_cores() -> int | None:
    if sys.platform != "win32":  # for mypy, which checks this module as Linux's
        return None
    kernel32 = ctypes.WinDLL("kernel32")
    size = ctypes.c_ulong(0)
    kernel32.GetLogicalProcessorInformationEx(_RELATION_PROCESSOR_CORE, None, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value)
    if not kernel32.GetLogicalProcessorInformationEx(
        _RELATION_PROCESSOR_CORE, buffer, ctypes.byref(size)
    ):
        return None
    return count_records(buffer.raw[: size.value])


def count_records(buffer: bytes) -> int:
    """The SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX records in `buffer`, one per core: each
    begins with its relationship and its own size in bytes (two little-endian DWORDs)."""
    count = offset = 0
    while offset + 8 <= len(buffer):
        _relationship, size = struct.unpack_from("<II", buffer, offset)
        if size == 0:
            break
        count, offset = count + 1, offset + size
    return count


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
