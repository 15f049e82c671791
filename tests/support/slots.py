"""Each slot of a parallel engine sampling at once, held to plain decoding of its request."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specrun.core.sampling import SamplingParams, probabilities
from specrun.engine import Engine
from specrun.llama.model import Model
from tests.support.distribution import assert_distributed, first_marginals
from tests.support.identity import committed
from tests.support.threads import in_threads


def assert_slots_distributed(
    engine: Engine,
    target: Path,
    prompts: Sequence[list[int]],
    params: SamplingParams,
    draws: int,
) -> None:
    """`draws` generations of three tokens for each prompt, all prompts at once (a thread
    each): each position's tokens follow plain decoding of its prompt alone, by a
    chi-square test (the first token from the prompt's pass, the next two from rounds
    decoded in batches with the other slots')."""

    def counted(prompt: list[int]) -> np.ndarray:
        counts = np.zeros((3, engine.target.n_vocab))
        for draw in range(draws):
            # Each generation's own seeded stream, so the counts do not depend on how the
            # threads' rounds happened to be batched together.
            rng = np.random.default_rng(draw)
            tokens = committed(engine.stream(prompt, max_tokens=3, params=params, rng=rng))
            for position, token in enumerate(tokens):
                counts[position, token] += 1
        return counts

    observed = in_threads([lambda p=p: counted(p) for p in prompts])
    with Model(target, n_ctx=256) as alone:

        def after(history: list[int]) -> np.ndarray:
            return probabilities(alone.logits(history, 1)[0], params)

        for prompt, counts in zip(prompts, observed):
            for position, expected in enumerate(first_marginals(after, prompt, 3)):
                assert_distributed(counts[position], expected)
