"""Whether other programs took the CPUs a generation needed: measured while it ran, judged after.

The load average when a run starts describes the minute before it (right after `make demo`
compiled llama.cpp, that compile), not what ran beside it. So a `Watch` reads, at both ends
of a generation, how long the CPUs this process may use were busy (Linux's /proc/stat, a
hypervisor's steal included) and this process's own CPU time: the difference over the wall
time is how many CPUs other programs kept busy meanwhile. Without /proc/stat (macOS) the
1-minute load average at both ends stands in; without either (Windows) nothing is judged.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from specrun.system.cpus import usable_cpus

_STAT = Path("/proc/stat")
# The columns of a /proc/stat CPU line that count as busy: user, nice, system, irq, softirq,
# steal (not idle and iowait; guest time is in user already).
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)
# The 1-minute load average decays with this time constant, on Linux and the BSDs alike.
_LOAD_SECONDS = 60.0
# Shorter windows say too little: /proc/stat counts in ticks of 10 ms, while the load
# average is updated every 5 seconds.
_MIN_STAT_SECONDS = 1.0
_MIN_LOAD_SECONDS = 15.0
# What others may use, beyond the CPUs the threads leave free, before it counts: a desktop's
# background work, and the tick-rounding of /proc/stat.
NOISE_CPUS = 0.25


@dataclass(frozen=True)
class Reading:
    """One end of a window."""

    wall: float  # time.monotonic()
    own: float  # this process's CPU seconds, all its threads
    busy: float | None  # busy seconds of the CPUs watched, all together; None without /proc/stat
    load: float | None  # the 1-minute load average; None where the OS has none


@dataclass(frozen=True)
class Contention:
    """Over one generation: the CPUs other programs kept busy, on average, beside its threads."""

    others: float
    cpus: int  # the CPUs this process may run on
    threads: int  # the generation's threads

    @property
    def slowed(self) -> bool:
        """Others took more than the CPUs the threads leave free: llama.cpp's threads wait for
        each other at every step, so one of them held up holds up all."""
        return self.others > max(0, self.cpus - self.threads) + NOISE_CPUS

    def warning(self) -> str | None:
        if not self.slowed:
            return None
        return (
            f"the machine was busy: other programs kept {self.others:.1f} of its {self.cpus} "
            f"CPUs busy beside specrun's {self.threads} threads, so generation was slower than "
            "on a quiet machine and its speed uneven"
        )


def busy_ticks(stat: str, cpus: list[int]) -> int | None:
    """The busy ticks of `cpus` together in /proc/stat's text; None where one is missing."""
    wanted = {f"cpu{cpu}" for cpu in cpus}
    ticks, found = 0, 0
    for line in stat.splitlines():
        name, _, rest = line.partition(" ")
        if name in wanted:
            columns = [int(column) for column in rest.split()]
            ticks += sum(columns[i] for i in _BUSY_COLUMNS if i < len(columns))
            found += 1
    return ticks if found == len(wanted) else None


def read(cpus: list[int]) -> Reading:
    try:
        ticks = busy_ticks(_STAT.read_text(encoding="ascii"), cpus)
        busy = ticks / os.sysconf("SC_CLK_TCK") if ticks is not None else None
    except (OSError, ValueError):  # not Linux, or no /proc
        busy = None
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        load = None
    return Reading(time.monotonic(), time.process_time(), busy, load)


def load_during(before: float, after: float, seconds: float) -> float:
    """The load that, held for `seconds`, takes the 1-minute average from `before` to `after`.
    The average is exponential: after = before·d + load·(1 − d), d = e^(−seconds/60), so what
    ran before the window (a compile) is taken out rather than counted as running beside it."""
    decay = math.exp(-seconds / _LOAD_SECONDS)
    return (after - before * decay) / (1 - decay)


def others_busy(start: Reading, end: Reading) -> float | None:
    """The CPUs other programs kept busy, on average, between two readings: the CPUs' busy
    time (else the load average) less this process's own. None where the window is too short
    for the measure at hand, or there is none."""
    seconds = end.wall - start.wall
    if seconds <= 0:
        return None
    own = (end.own - start.own) / seconds
    if start.busy is not None and end.busy is not None:
        if seconds < _MIN_STAT_SECONDS:
            return None
        return max(0.0, (end.busy - start.busy) / seconds - own)
    if start.load is not None and end.load is not None and seconds >= _MIN_LOAD_SECONDS:
        return max(0.0, load_during(start.load, end.load, seconds) - own)
    return None


class Watch:
    """Started as a generation starts; `stop` once it has ended."""

    def __init__(self) -> None:
        self.cpus = usable_cpus()
        self.start = read(self.cpus)

    def stop(self, threads: int) -> Contention | None:
        others = others_busy(self.start, read(self.cpus))
        return None if others is None else Contention(others, len(self.cpus), threads)
