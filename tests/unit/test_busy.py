"""Whether other programs slowed a generation: /proc/stat read, the window's arithmetic, the
load-average fallback and the judgement (specrun.system.busy)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from specrun.system.busy import (
    Contention,
    Reading,
    busy_ticks,
    load_during,
    others_busy,
    read,
)
from specrun.system.cpus import usable_cpus

STAT = """\
cpu  300 10 60 900 50 5 5 20 0 0
cpu0 100 0 20 500 40 1 2 7 0 0
cpu1 200 10 40 400 10 4 3 13 0 0
intr 12345 0 0
ctxt 999
"""


def test_busy_ticks_are_all_but_idle_and_iowait_of_the_cpus_watched():
    assert busy_ticks(STAT, [0]) == 100 + 0 + 20 + 1 + 2 + 7
    assert busy_ticks(STAT, [1]) == 200 + 10 + 40 + 4 + 3 + 13
    assert busy_ticks(STAT, [0, 1]) == 130 + 270  # not the aggregate line: only these CPUs
    assert busy_ticks(STAT, [2]) is None  # a CPU the text does not have: no figure


def test_others_are_the_busy_cpus_less_our_own():
    start = Reading(wall=10.0, own=1.0, busy=100.0, load=None)
    # 4 s: the CPUs were busy for 7 s together, 3 of them ours.
    end = Reading(wall=14.0, own=4.0, busy=107.0, load=None)
    assert others_busy(start, end) == pytest.approx(1.0)
    # Tick rounding may make ours exceed what /proc/stat counted: never below zero.
    assert others_busy(start, Reading(14.0, 4.5, 103.0, None)) == 0.0
    # Under a second, ticks of 10 ms say too little.
    assert others_busy(start, Reading(10.5, 1.5, 101.0, None)) is None


def test_the_load_average_stands_in_without_proc_stat():
    """The 1-minute average after a compile (load 4) then 30 s of load 1.5: the compile is
    taken out, our own 1 CPU too."""
    decay = math.exp(-30 / 60)
    after = 4 * decay + 1.5 * (1 - decay)
    assert load_during(4, after, 30) == pytest.approx(1.5)
    start = Reading(wall=0.0, own=0.0, busy=None, load=4.0)
    assert others_busy(start, Reading(30.0, 30.0, None, after)) == pytest.approx(0.5)
    # Updated every 5 s, the average says nothing of a few seconds.
    assert others_busy(start, Reading(10.0, 10.0, None, 3.5)) is None
    # Neither figure (Windows): no judgement.
    assert others_busy(Reading(0.0, 0.0, None, None), Reading(30.0, 30.0, None, None)) is None


def test_a_warning_where_others_took_more_than_the_threads_leave_free():
    assert Contention(others=0.25, cpus=2, threads=2).warning() is None  # background noise
    assert Contention(others=1.2, cpus=2, threads=1).warning() is None  # the free CPU took it
    assert Contention(others=1.3, cpus=2, threads=2).warning() == (
        "the machine was busy: other programs kept 1.3 of its 2 CPUs busy beside specrun's "
        "2 threads, so generation was slower than on a quiet machine and its speed uneven"
    )
    assert Contention(others=1.3, cpus=2, threads=1).warning() is not None
    assert Contention(others=3.0, cpus=2, threads=4).warning() is not None  # threads beyond CPUs


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="Linux's /proc/stat")
def test_our_own_work_shows_in_proc_stat_as_in_our_cpu_time():
    """What this process spins is in /proc/stat's busy time, in the same seconds as its own
    CPU time: so subtracting one from the other leaves the others."""
    cpus = usable_cpus()
    start = read(cpus)
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        pass
    end = read(cpus)
    assert start.busy is not None and end.busy is not None
    seconds = end.wall - start.wall
    own, busy = (end.own - start.own) / seconds, (end.busy - start.busy) / seconds
    assert own > 0.3  # spinning, however busy the machine is
    assert own - 0.1 <= busy <= len(cpus) + 0.1
