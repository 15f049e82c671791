"""One answer being generated in a worker thread, read by the screen at its own pace.

The worker adds the engine's events as they come; the screen's timer takes what is
new about 20 times a second. A lock guards the hand-over: Stats is not safe to read
while the worker adds to it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable

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
    def __init__(self) -> None:
        self.stats = Stats()  # read it only once the generation has finished
        self.error: str | None = None
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._segments: list[Segment] = []
        self._figures: list[Figures] = []

    def stop(self) -> None:
        """Ask the loop to end after the current round (it polls `stop_requested`)."""
        self._stop.set()

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def stop_and_wait(self, timeout: float = 10.0) -> None:
        """Stop, and wait for the worker to leave llama.cpp, so the models can be closed."""
        self.stop()
        self._finished.wait(timeout)

    def consume(self, events: Iterable[Event], policy_name: Callable[[], str]) -> None:
        """The worker thread's body: collect every event; an engine error ends the answer."""
        try:
            for event in events:
                with self._lock:
                    self.stats.add(event)
                    if isinstance(event, Round):
                        self._segments.extend(event.segments)
                        self._figures.append(Figures.read(self.stats, policy_name()))
        except SpecrunError as error:
            self.error = str(error)
        finally:
            self._finished.set()

    def take(self) -> tuple[list[Segment], list[Figures]]:
        """What arrived since the last call: text segments and one reading per round."""
        with self._lock:
            segments, self._segments = self._segments, []
            figures, self._figures = self._figures, []
        return segments, figures

    @property
    def finish_reason(self) -> str | None:
        return self.stats.finish_reason
