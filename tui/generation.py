"""One answer being generated in a worker thread, read by the screen at its own pace.

The worker queues the engine's events as they come; the screen's timer takes what is
new a few times a second.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from specrun.errors import SpecrunError
from specrun.speculative import Event, Round, Segment
from specrun.stats import Stats


@dataclass(frozen=True)
class Figures:
    """One reading of the live panel, taken from Stats (the panel computes nothing)."""

    recent_tokens_per_second: float | None
    tokens_per_second: float | None
    acceptance_rate: float | None
    gamma: int | None
    policy: str
    mean_accepted_length: float | None
    estimated_speedup: float | None

    @classmethod
    def empty(cls, policy: str) -> "Figures":
        return cls(None, None, None, None, policy, None, None)

    @classmethod
    def read(cls, stats: Stats, policy: str) -> "Figures":
        return cls(
            recent_tokens_per_second=stats.recent_tokens_per_second,
            tokens_per_second=stats.tokens_per_second,
            acceptance_rate=stats.acceptance_rate,
            gamma=stats.gamma_trace[-1] if stats.gamma_trace else None,
            policy=policy,
            mean_accepted_length=stats.mean_accepted_length,
            estimated_speedup=stats.estimated_speedup,
        )


class Generation:
    """One answer: the worker thread hands the engine's events over, the screen reads them.

    The worker does nothing else, so the time between rounds, which the loop counts as
    overhead and `auto` learns from, is the engine's own and not the front end's.
    Stats and the panel's readings are computed on the screen's side, at its pace.
    """

    def __init__(self) -> None:
        self.stats = Stats()  # fed by `take`; complete once the worker has finished and `take` ran
        self.error: str | None = None
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._events: deque[Event] = deque()  # append and popleft are atomic: no lock needed

    def stop(self) -> None:
        """Ask the loop to end after the current round (it polls `stop_requested`)."""
        self._stop.set()

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def stop_and_wait(self, timeout: float = 10.0) -> None:
        """Stop, and wait for the worker to leave llama.cpp, so the models can be closed."""
        self.stop()
        self._finished.wait(timeout)

    def consume(self, events: Iterable[Event]) -> None:
        """The worker thread's body: hand each event over; an engine error ends the answer."""
        try:
            for event in events:
                self._events.append(event)
        except SpecrunError as error:
            self.error = str(error)
        finally:
            self._finished.set()

    def take(self, policy: str) -> tuple[list[Segment], list[Figures]]:
        """What arrived since the last call, added to `stats`: its text segments and one
        reading per round."""
        segments: list[Segment] = []
        readings: list[Figures] = []
        while self._events:
            event = self._events.popleft()
            self.stats.add(event)
            if isinstance(event, Round):
                segments.extend(event.segments)
                readings.append(Figures.read(self.stats, policy))
        return segments, readings

    @property
    def finish_reason(self) -> str | None:
        return self.stats.finish_reason
