"""Counting physical cores where Linux's topology is not there to read."""

from __future__ import annotations

import struct

from specrun.system import cpus

RELATION_PROCESSOR_CORE = 0


def record(size: int) -> bytes:
    """A SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX of `size` bytes (its body left zero)."""
    return struct.pack("<II", RELATION_PROCESSOR_CORE, size) + bytes(size - 8)


def test_windows_lists_one_record_per_core_each_of_its_own_size():
    assert cpus.count_records(record(48) * 8) == 8
    assert cpus.count_records(record(48) + record(80) + record(48)) == 3  # sizes differ
    assert cpus.count_records(b"") == 0
    assert cpus.count_records(record(48) + struct.pack("<II", 0, 0)) == 1  # a size of 0 ends it
    assert cpus.count_records(record(48) + b"\0\0\0") == 1  # a cut-off tail is not a core


def test_the_cores_are_never_more_than_the_cpus_this_process_may_use():
    assert 1 <= cpus.physical_cores() <= len(cpus.usable_cpus())
