"""Reproducible greedy output: which way of decoding makes a position's logits independent
of the pass that computes them, on this build and model (DESIGN.md, Reproducible)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    chosen by `Model.probe_invariance` on this build and model, the first that holds of:

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
