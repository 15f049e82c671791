"""Reproducible greedy output: which way of decoding makes a position's logits independent
of the pass that computes them, on this build and model (DESIGN.md, Reproducible)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

InvarianceMode = Literal["batch", "padded", "chunked", "serial"]

# REPACK's kernels that give a position the same logits alone as in a batch, measured on
# x86 AVX2 (bench/results/invariance.txt): Q4_0's are; Q4_K's GEMM and GEMV differ.
INVARIANT_REPACK_TYPES = frozenset({"Q4_0"})
# Positions the load-time check evaluates each way: the widest verify of γ_max 8.
PROBE_POSITIONS = 9
CHUNK_WIDTHS = (3, 2)  # the "chunked" widths the check tries, widest first


@dataclass(frozen=True)
class Invariance:
    """How `reproducible` keeps each position's logits independent of the batch it is in,
    chosen by `probe_invariance` on this build and model, the first that holds of:

    "batch": batches and single positions agree bit for bit; verifies run batched.
    "padded": a lone position differs, batches of two or more agree: no pass is
    narrower than two positions (a lone one re-decodes the position before it).
    "chunked": passes of up to `width` positions agree with single ones: verifies run
    `width` positions per pass.
    "serial": positions with logits are decoded one per pass, the kernel of plain
    decoding, so a draft cannot save anything.
    """

    mode: InvarianceMode
    difference: float  # largest logit difference, one batch vs one position at a time
    width: int | None = None  # "chunked": positions per pass

    def describe(self) -> str:
        differ = f"a batch's logits differ from a lone position's (up to {self.difference:.2g})"
        if self.mode == "batch":
            return "batches and lone positions give identical logits: verifying in batches"
        if self.mode == "padded":
            return (
                f"{differ}, batches of 2 or more agree: "
                "every target pass spans at least 2 positions"
            )
        if self.mode == "chunked":
            return (
                f"{differ}, passes of up to {self.width} positions do not: "
                f"verifying {self.width} per pass"
            )
        return (
            f"{differ}: verifying one position per pass, "
            "so a draft saves nothing (--gamma 0 is fastest)"
        )


class Probed(Protocol):
    """What the probe decodes with: a `Model`'s one-sequence calls and its pass widths."""

    n_vocab: int
    min_width: int
    max_width: int | None

    def logits(self, seq: Sequence[int], last: int = 1) -> np.ndarray: ...

    def reset(self) -> None: ...


def probe_invariance(model: Probed) -> Invariance:
    """Evaluate the last PROBE_POSITIONS positions of a fixed sequence one per pass, in
    one batch, in two, and in each way `Invariance` names; have `model` decode from now on in
    the first way whose logits are those of one position per pass, bit for bit (a kernel
    that differs at all differs here)."""
    sequence = [(7919 * i + 13) % model.n_vocab for i in range(PROBE_POSITIONS + 4)]
    ends = range(len(sequence) - PROBE_POSITIONS + 1, len(sequence) + 1)

    def evaluate(
        min_width: int, max_width: int | None, stops: Sequence[int] = ends[-1:]
    ) -> np.ndarray:
        model.reset()
        model.min_width, model.max_width = min_width, max_width
        rows = [
            model.logits(sequence[:stop], stop - start)
            for start, stop in zip([ends[0] - 1, *stops], stops)
        ]
        return np.concatenate(rows)

    try:
        single = evaluate(1, 1)
        batch = evaluate(1, None)
        # Widths 2 and 7: other widths, other slots. Equal, batches agree among themselves.
        batches_agree = np.array_equal(batch, evaluate(1, None, [ends[1], ends[-1]]))
        if batches_agree and np.array_equal(batch, single):
            found = Invariance("batch", 0.0)
        elif batches_agree and np.array_equal(batch, evaluate(2, None, ends)):
            found = Invariance("padded", float(np.abs(batch - single).max()))
        else:
            width = next((w for w in CHUNK_WIDTHS if np.array_equal(single, evaluate(1, w))), None)
            found = Invariance(
                "chunked" if width else "serial", float(np.abs(batch - single).max()), width
            )
    finally:
        model.reset()
    model.min_width = 2 if found.mode == "padded" else 1
    model.max_width = found.width or (1 if found.mode == "serial" else None)
    return found
