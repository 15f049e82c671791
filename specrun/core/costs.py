"""What a round costs and what it yields: the measured costs of drafting, verifying and the
loop's own time, and the expected tokens a second at a given acceptance and γ.

Pure: it sees only the loop's Round events (duck-typed: `RoundLike`), so it is tested
without a model.
"""

from __future__ import annotations

import math
from typing import Protocol, TypedDict, TypeVar

K = TypeVar("K")


class RoundLike(Protocol):
    """What the policies and the cost model read of a round, read-only (a Round is frozen)."""

    @property
    def finish_reason(self) -> str | None: ...
    @property
    def gamma(self) -> int: ...
    @property
    def drafted(self) -> int: ...
    @property
    def accepted(self) -> int: ...
    @property
    def draft_seconds(self) -> float: ...  # proposing, without catching up
    @property
    def verify_seconds(self) -> float: ...
    @property
    def overhead_seconds(self) -> float: ...
    @property
    def catch_up_seconds(self) -> float: ...  # the draft taking in tokens committed while it paused
    @property
    def verify_first_of_shape(self) -> bool: ...  # the target's first decode of this batch shape
    @property
    def shared_rows(self) -> int: ...  # other slots' rows in the verify's decode
    @property
    def shared_with(self) -> int: ...  # how many slots they were for
    @property
    def seconds(self) -> float: ...  # all four


# A measured cost: (value, samples).
Measure = tuple[float, int]
# The means a CostModel keeps besides its verify curve: drafting per token (or per pass, of a
# block draft) and the loop's own time.
MEANS = ("draft", "pass", "overhead")


class CostState(TypedDict):
    """CostModel.state(), kept as JSON between runs (specrun.core.learned): each Measure
    comes back as a list, which `resume` unpacks the same."""

    means: dict[str, Measure]
    verify: dict[str, Measure]  # by width, as text (JSON's keys)


def is_plain_sample(event: RoundLike, last_drafted: int | None) -> bool:
    """Whether a round measures plain decoding's cost: it drafted nothing, and neither did
    the round before (the round after a draft pays for following it; the first round of a
    generation, with no round before, pays one-time costs). Stats measures these rounds,
    PlainSamples schedules them."""
    return event.drafted == 0 and last_drafted == 0


class CostModel:
    """Measured costs of a round.

    t_draft: draft time per drafted token, or with `per_pass` (a block draft, which drafts
    them all in one pass) t_pass, its time per pass; t_verify(k): target time to evaluate k
    positions in one call, per width (on CPU it is far from flat), counting the rows of
    other slots decoded in the same batch; t_overhead: the loop's own time per round. With
    `decay` the figures are exponentially weighted, so they follow the machine's state; with
    decay=None they are plain means.
    """

    def __init__(self, decay: float | None = 0.8, *, per_pass: bool = False) -> None:
        self.decay = decay
        self.per_pass = per_pass
        self._means: dict[str, Measure] = {}  # one of MEANS -> (value, samples)
        self._verify: dict[int, Measure] = {}  # width -> (value, samples)
        self._widths: dict[int, float] | None = None  # measured_widths, until the next update
        self._curve: list[float] | None = None  # verify_curve, until the next update

    def _update(self, table: dict[K, Measure], key: K, value: float) -> None:
        old, count = table.get(key, (value, 0))
        # A plain mean over the first samples (so one odd sample does not stand for
        # long), exponential weighting after that.
        weight = 1 / (count + 1) if self.decay is None else max(1 / (count + 1), 1 - self.decay)
        table[key] = (old + weight * (value - old), count + 1)
        self._widths = self._curve = None

    @property
    def t_draft(self) -> float | None:
        return self._means.get("draft", (None,))[0]

    @property
    def t_pass(self) -> float | None:
        return self._means.get("pass", (None,))[0]

    @property
    def t_overhead(self) -> float | None:
        return self._means.get("overhead", (None,))[0]

    def drafting_seconds(self, gamma: int) -> float | None:
        """Drafting γ tokens: γ·t_draft, or one pass; None where nothing was drafted yet."""
        if gamma == 0:
            return 0.0
        if self.per_pass:
            return self.t_pass
        return None if self.t_draft is None else gamma * self.t_draft

    def observe(self, event: RoundLike) -> None:
        if event.drafted > 0 and self.per_pass:
            self._update(self._means, "pass", event.draft_seconds)
        elif event.drafted > 0:
            self._update(self._means, "draft", event.draft_seconds / event.drafted)
        self._update(self._means, "overhead", event.overhead_seconds)
        if event.verify_first_of_shape:
            return  # its time includes setting up the shape's graph and buffers, paid once
        width, seconds = event.drafted + 1 + event.shared_rows, event.verify_seconds
        if width > 1 and 1 in self._verify:
            # A batch of k positions never costs more than k single decodes; a sample that
            # does is a stall (another process, paging), and taken as the cost it would
            # rule speculation out for good. Half as much again is left for noise.
            seconds = min(seconds, 1.5 * width * self._verify[1][0])
        self._update(self._verify, width, seconds)

    def state(self) -> CostState:
        return {"means": self._means, "verify": {str(w): v for w, v in self._verify.items()}}

    def resume(self, state: CostState, max_samples: int) -> None:
        """Take over saved figures, each as if from at most `max_samples` samples, so the
        figures measured from here on soon outweigh them."""

        def capped(table: dict[str, Measure]) -> dict[str, Measure]:
            return {
                key: (float(value), min(int(count), max_samples))
                for key, (value, count) in table.items()
            }

        self._means = capped(state["means"])
        self._verify = {int(width): pair for width, pair in capped(state["verify"]).items()}
        self._widths = self._curve = None

    @property
    def measured_widths(self) -> dict[int, float]:
        if self._widths is None:
            self._widths = {width: value for width, (value, _) in sorted(self._verify.items())}
        return self._widths

    def verify_curve(self, widths: int) -> list[float]:
        """t_verify(1..widths), until the next update: the γ policy reads it twice a round.
        Past the widest measured width it is one line, worked out once."""
        if self._curve is None or len(self._curve) != widths:
            measured = self.measured_widths
            if not measured:
                self._curve = []
            else:
                widest = next(reversed(measured))
                curve = [self._estimate(width) for width in range(1, min(widest, widths) + 1)]
                slope = self._slope_past_widest()
                curve += [
                    measured[widest] + slope * (width - widest)
                    for width in range(widest + 1, widths + 1)
                ]
                self._curve = curve
        return self._curve

    def _slope_past_widest(self) -> float:
        """The slope t_verify follows past the widest measured width (see there)."""
        measured = self.measured_widths
        if len(measured) < 2:
            return 0.0
        last, before = list(measured)[-1:-3:-1]
        if min(self._verify[last][1], self._verify[before][1]) < 2:
            return 0.0
        return max((measured[last] - measured[before]) / (last - before), 0.0)

    def t_verify(self, width: int) -> float | None:
        """Measured; else linear between the measured neighbours; beyond the widest measured,
        extended along the last slope where it rises and both its ends were measured more
        than once (a CPU's steep verify rules wide drafts out before they are tried, but one
        sample is no slope), else that width's time
        (flat, as on a GPU: the policy tries wider drafts and learns their cost); below the
        narrowest, along the first slope. None before any width was measured."""
        return self._estimate(width) if self.measured_widths else None

    def _estimate(self, width: int) -> float:
        """t_verify where some width was measured."""
        measured = self.measured_widths
        if width in measured:
            return measured[width]
        widths = list(measured)
        if width > widths[-1]:
            return measured[widths[-1]] + self._slope_past_widest() * (width - widths[-1])
        if len(widths) == 1:
            return measured[widths[0]]
        upper = next(w for w in widths if w > width)
        lower = max((w for w in widths if w < width), default=widths[0])
        if lower == upper:  # below the narrowest measured width
            lower, upper = widths[0], widths[1]
        slope = (measured[upper] - measured[lower]) / (upper - lower)
        return max(measured[lower] + slope * (width - lower), 0.0)


def expected_tokens(alpha: float, gamma: int) -> float:
    """E[N] tokens per round when each draft token is accepted with probability alpha."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_rate(
    alpha: float,
    gamma: int,
    t_draft: float,
    t_verify: float,
    t_overhead: float,
    shared_tokens: float = 0.0,
) -> float:
    """Expected tokens per second of rounds at this γ (Leviathan et al. 2023, with measured
    costs), counting `shared_tokens` that other slots commit in the same rounds: their
    rounds wait for this one's rows."""
    return round_rate(
        expected_tokens(alpha, gamma) + shared_tokens, gamma * t_draft + t_verify + t_overhead
    )


def round_rate(tokens: float, seconds: float) -> float:
    """Tokens per second of rounds that yield `tokens` in `seconds` (inf where they cost none)."""
    return tokens / seconds if seconds > 0 else math.inf
