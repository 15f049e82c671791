"""Where a greedy speculative output departs from plain decoding, and whether that is a near tie.

llama.cpp may compute slightly different logits for a batch of k tokens than for one
token at a time, so two near-tied logits can flip. A divergence is legitimate only
where the target's top two logits at that position, from a fresh evaluation, are
within a small epsilon; anything else is a bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specrun.core.model import LanguageModel


@dataclass(frozen=True)
class Divergence:
    index: int  # first token where the outputs differ
    top_two_gap: float  # the target's top-two logit gap there (fresh evaluation)
    among_top_two: bool  # both tokens are the target's two best

    def is_near_tie(self, epsilon: float) -> bool:
        return self.among_top_two and self.top_two_gap < epsilon

    def describe(self) -> str:
        where = (
            "among the target's top two" if self.among_top_two else "NOT among the target's top two"
        )
        return f"token {self.index}: {where}, top-two logit gap {self.top_two_gap:.4f}"


def first_divergence(
    target: LanguageModel, prompt: Sequence[int], reference: Sequence[int], other: Sequence[int]
) -> Divergence | None:
    """None when the outputs agree (one may be a prefix of the other only if it was cut short)."""
    index = next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if index is None:
        return None
    logits = target.logits(list(prompt) + list(reference[:index]), 1)[0]
    best, second = np.argsort(logits)[-2:][::-1]
    return Divergence(
        index=index,
        top_two_gap=float(logits[best] - logits[second]),
        among_top_two={int(reference[index]), int(other[index])} == {int(best), int(second)},
    )
