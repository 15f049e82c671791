"""Greedy identity: speculative output must equal the target's own, token for token.

llama.cpp may compute slightly different logits for a batch of k tokens than for one
token at a time, so two near-tied logits can flip (DESIGN.md). A first divergence is
accepted only where the target's top two logits at that position, from a fresh
evaluation, are within `epsilon`; anything else fails.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specrun.drafting import DraftSource
from specrun.gamma import GammaPolicy
from specrun.runtime import Model
from specrun.sampling import SamplingParams
from specrun.speculative import Round, generate

GREEDY = SamplingParams(temperature=0)


def greedy_tokens(target: Model, prompt: Sequence[int], draft: DraftSource | None = None,
                  policy: GammaPolicy | None = None, max_tokens: int = 48) -> tuple[list[int], list[Round]]:
    rounds = [e for e in generate(target, prompt, draft=draft, params=GREEDY, policy=policy,
                                  max_tokens=max_tokens) if isinstance(e, Round)]
    return [t for r in rounds for t in r.tokens], rounds


def assert_greedy_identical(target: Model, prompt: Sequence[int], plain: list[int],
                            speculative: list[int], epsilon: float) -> str:
    """Return 'identical' or a description of a legitimate near-tie divergence."""
    if plain == speculative:
        return "identical"
    i = next((k for k, (a, b) in enumerate(zip(plain, speculative)) if a != b), min(len(plain), len(speculative)))
    assert i < min(len(plain), len(speculative)), f"one output is a prefix of the other at {i}"
    target.reset()
    logits = target.logits(list(prompt) + plain[:i], 1)[0]
    top_two = np.sort(logits)[-2:]
    gap = float(top_two[1] - top_two[0])
    assert {plain[i], speculative[i]} <= set(np.argsort(logits)[-2:].tolist()), (
        f"diverged at token {i} to a token that is not among the target's top two"
    )
    assert gap < epsilon, f"diverged at token {i} where the target's top two logits differ by {gap:.4f}"
    return f"near tie at token {i} (top-two gap {gap:.5f})"
