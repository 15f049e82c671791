"""Live statistics of a generation, derived from the loop's events and nothing else.

Every front end (run --stats/--json, bench, the TUI) reads its figures from here,
so no figure is computed twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from specrun.core.costs import CostModel, is_plain_sample
from specrun.core.loop import Event, FinishReason, Prefill, Round
from specrun.core.sampling import NEAR_TIE
from specrun.system.formatting import format_or_dash

# Why a generation ended, as its figures report it: the loop's reasons, or what the CLI sets
# where a signal stopped it ("interrupted") or a native abort ended it ("error").
ReportedFinishReason = FinishReason | Literal["interrupted", "error"]


class StatsRecord(TypedDict):
    """`Stats.as_dict()`: the figures of `run --json`, `bench --json` and the server's
    `specrun` object (documented in the README), in this order."""

    prompt_tokens: int
    prompt_evaluated: int
    prompt_seconds: float
    prompt_tokens_per_second: float | None
    time_to_first_token: float | None
    generated_tokens: int
    decode_seconds: float
    tokens_per_second: float | None
    rounds: int
    drafted: int
    accepted: int
    acceptance_rate: float | None
    rejections: int
    near_ties: int
    near_tie_epsilon: float
    per_token_acceptance: float | None
    mean_accepted_length: float | None
    mean_gamma: float | None
    gamma_trace: list[int]
    per_position_acceptance: list[float]
    estimated_speedup: float | None
    estimated_speedup_plain_rounds: int
    overhead_seconds_per_round: float | None
    verify_seconds_by_width: dict[int, float]  # JSON writes the widths as text
    finish_reason: ReportedFinishReason | None
    dropped_messages: int


@dataclass
class Stats:
    recent_rounds: int = 16  # the window of the live tokens/s
    prompt_tokens: int = 0
    prompt_evaluated: int = 0  # prompt tokens actually decoded (the rest came from the cache)
    prompt_seconds: float = 0.0
    generated: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0  # rounds in which the target rejected a drafted token
    near_ties: int = 0  # greedy tokens chosen by a top-two logit gap below sampling.NEAR_TIE
    ended_at_eog: int = 0  # generations that ended at an end-of-generation token
    prompt_passes: int = 0  # first rounds, whose token the prompt's pass chose (one a generation)
    decode_seconds: float = 0.0
    # Rounds that drafted nothing right after another that drafted nothing, but never the
    # first (it pays one-time costs): what a plain token costs, measured. Right after a
    # drafting round the target runs slower (the draft has just had the caches), which plain
    # decoding never pays. The speedup figure divides by this and nothing else.
    plain_rounds: int = 0
    plain_seconds: float = 0.0
    first_round_seconds: float | None = None
    finish_reason: ReportedFinishReason | None = None
    # The oldest messages a server dropped so that the conversation fit its context
    # (specrun.context_overflow's truncate).
    dropped_messages: int = 0
    gamma_trace: list[int] = field(default_factory=list)
    # position i (0-based): rounds that drafted at least i+1 tokens / of those,
    # accepted at least i+1
    position_drafted: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    # Each round's committed tokens: the text's stop string is read back from them.
    committed: list[tuple[int, ...]] = field(default_factory=list)
    costs: CostModel = field(default_factory=lambda: CostModel(decay=None))
    _recent: deque[tuple[int, float]] = field(default_factory=deque)  # (tokens, seconds)
    _last_drafted: int | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, Prefill):
            self.prompt_tokens += event.prompt_tokens
            self.prompt_evaluated += event.evaluated
            self.prompt_seconds += event.seconds
            return
        self._add_round(event)

    def _add_round(self, event: Round) -> None:
        if event.finish_reason:
            self.finish_reason = event.finish_reason
        if event.finish_reason == "cancelled" and not event.tokens:
            return  # not a forward pass
        self.rounds += 1
        self.generated += len(event.tokens)
        self.committed.append(event.tokens)
        self.drafted += event.drafted
        self.accepted += event.accepted
        self.rejections += event.accepted < event.drafted
        self.near_ties += event.near_ties
        self.ended_at_eog += event.ended_at_eog
        self.decode_seconds += event.seconds
        self.gamma_trace.append(event.gamma)
        if self.first_round_seconds is None:
            self.first_round_seconds = event.seconds
        if event.prompt_pass:  # no decode of its own: no cost to learn, no rate for the live figure
            self.prompt_passes += 1
            self._last_drafted = None
            return
        if is_plain_sample(event, self._last_drafted):
            self.plain_rounds += 1
            self.plain_seconds += event.verify_seconds + event.overhead_seconds
        self._last_drafted = event.drafted
        for i in range(event.drafted):
            if i == len(self.position_drafted):
                self.position_drafted.append(0)
                self.position_accepted.append(0)
            self.position_drafted[i] += 1
            self.position_accepted[i] += i < event.accepted
        self.costs.observe(event)
        self._recent.append((len(event.tokens), event.seconds))
        if len(self._recent) > self.recent_rounds:
            self._recent.popleft()

    # --- derived figures ---------------------------------------------------------------

    @property
    def tokens_per_second(self) -> float | None:
        return self.generated / self.decode_seconds if self.decode_seconds > 0 else None

    @property
    def recent_tokens_per_second(self) -> float | None:
        seconds = sum(s for _, s in self._recent)
        return sum(n for n, _ in self._recent) / seconds if seconds > 0 else None

    @property
    def prompt_tokens_per_second(self) -> float | None:
        return (
            self.prompt_evaluated / self.prompt_seconds
            if self.prompt_seconds > 0 and self.prompt_evaluated
            else None
        )

    @property
    def time_to_first_token(self) -> float | None:
        if self.first_round_seconds is None:
            return None
        return self.prompt_seconds + self.first_round_seconds

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def per_token_acceptance(self) -> float | None:
        """α of the cost model: accepted / (accepted + rejections), the chance that the
        next drafted token is accepted given the ones before it were."""
        trials = self.accepted + self.rejections
        return self.accepted / trials if trials else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens committed per target forward pass (1.0 is plain decoding)."""
        return self.generated / self.rounds if self.rounds else None

    @property
    def mean_gamma(self) -> float | None:
        return sum(self.gamma_trace) / len(self.gamma_trace) if self.gamma_trace else None

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / d for a, d in zip(self.position_accepted, self.position_drafted)]

    @property
    def estimated_speedup(self) -> float | None:
        """(the rounds plain decoding takes × the measured time of one) / decode wall time.

        Plain decoding takes a round for each generated token, and one more where the answer
        ended at an end-of-generation token, which is not counted among the tokens, but for
        the first, which the prompt's pass chose (so the rounds here bar the first). None
        until a plain round has been measured: the γ policies decode plainly now and then
        for this (gamma.PlainSamples), prompt lookup whenever nothing matches.
        """
        if not self.plain_rounds or not self.decode_seconds:
            return None
        plain_rounds_needed = self.generated + self.ended_at_eog - self.prompt_passes
        return plain_rounds_needed * (self.plain_seconds / self.plain_rounds) / self.decode_seconds

    def as_dict(self) -> StatsRecord:
        """The figures of `run --json` and `bench --json` (documented in the README)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "prompt_evaluated": self.prompt_evaluated,
            "prompt_seconds": self.prompt_seconds,
            "prompt_tokens_per_second": self.prompt_tokens_per_second,
            "time_to_first_token": self.time_to_first_token,
            "generated_tokens": self.generated,
            "decode_seconds": self.decode_seconds,
            "tokens_per_second": self.tokens_per_second,
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": self.acceptance_rate,
            "rejections": self.rejections,
            "near_ties": self.near_ties,
            "near_tie_epsilon": NEAR_TIE,
            "per_token_acceptance": self.per_token_acceptance,
            "mean_accepted_length": self.mean_accepted_length,
            "mean_gamma": self.mean_gamma,
            "gamma_trace": self.gamma_trace,
            "per_position_acceptance": self.per_position_acceptance,
            "estimated_speedup": self.estimated_speedup,
            "estimated_speedup_plain_rounds": self.plain_rounds,  # its basis: plain rounds measured
            "overhead_seconds_per_round": self.costs.t_overhead,
            "verify_seconds_by_width": self.costs.measured_widths,
            "finish_reason": self.finish_reason,
            "dropped_messages": self.dropped_messages,
        }

    def summary_lines(self, extra: Sequence[tuple[str, str]] = ()) -> list[str]:
        """Aligned human-readable figures for `--stats` (stderr), `extra` (name, value) rows
        last."""
        rows = [
            (
                "prompt",
                f"{self.prompt_tokens} tokens ({self.prompt_evaluated} evaluated), "
                f"{format_or_dash(self.prompt_tokens_per_second, '.1f', ' tok/s')}",
            ),
            (
                "first token",
                format_or_dash(
                    self.time_to_first_token and self.time_to_first_token * 1000, ".0f", " ms"
                ),
            ),
            (
                "generated",
                f"{self.generated} tokens, "
                f"{format_or_dash(self.tokens_per_second, '.1f', ' tok/s')}",
            ),
            ("rounds", str(self.rounds)),
            ("drafted", str(self.drafted)),
            ("accepted", str(self.accepted)),
            (
                "acceptance",
                format_or_dash(self.acceptance_rate and self.acceptance_rate * 100, ".1f", "%"),
            ),
            ("near ties", f"{self.near_ties} tokens (top-two logit gap < {NEAR_TIE})"),
            (
                "mean accepted length",
                format_or_dash(self.mean_accepted_length, ".2f", " tokens/pass"),
            ),
            ("mean gamma", format_or_dash(self.mean_gamma, ".2f")),
            ("est. speedup", format_or_dash(self.estimated_speedup, ".2f", "x")),
            *extra,
        ]
        width = max(len(name) for name, _ in rows)
        return [f"{name:<{width}}  {value}" for name, value in rows]
