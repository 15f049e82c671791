"""One answer as the TUI sees it: the engine's events, read off the pipe in batches."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specrun.core.loop import Event, Round
from specrun.core.stats import Stats
from specrun.core.text import Segment
from specrun.system.formatting import format_or_dash


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
    def empty(cls, policy: str) -> Figures:
        return cls(None, None, None, None, policy, None, None)

    @classmethod
    def read(cls, stats: Stats, policy: str) -> Figures:
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
    """One answer: the engine process's events, added to Stats as the screen reads them.

    The engine process only sends its events, so the time between rounds, which the
    loop counts as overhead and `auto` learns from, is the engine's own, as in
    `specrun run`; Stats and the panel's readings are computed here, at the TUI's pace.
    """

    def __init__(self) -> None:
        self.stats = Stats()

    def add(self, events: Iterable[Event], policy: str) -> tuple[list[Segment], list[Figures]]:
        """Add `events` to `stats`; their text segments and one reading per round."""
        segments: list[Segment] = []
        readings: list[Figures] = []
        for event in events:
            self.stats.add(event)
            if isinstance(event, Round):
                segments.extend(event.segments)
                readings.append(Figures.read(self.stats, policy))
        return segments, readings

    @property
    def finish_reason(self) -> str | None:
        return self.stats.finish_reason


def summary_line(stats: Stats, draft: str) -> str:
    """The line under an answer: its tokens, tokens/s, time to first token, the draft and
    the estimated speedup, as Stats computed them."""
    return " · ".join(
        [
            f"{stats.generated} tokens",
            format_or_dash(stats.tokens_per_second, ".1f", " tok/s"),
            f"TTFT {_duration(stats.time_to_first_token)}",
            "no draft" if draft == "none" else f"draft {draft}",
            "est. speedup " + format_or_dash(stats.estimated_speedup, ".2f", "x"),
        ]
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
