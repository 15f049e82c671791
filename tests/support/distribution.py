"""Sampled output held to a distribution: a chi-square test of observed counts against the
probabilities expected, and the marginals of a generation's first tokens under plain decoding."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import chisquare


def assert_distributed(observed: np.ndarray, expected: np.ndarray) -> None:
    """Nothing outside `expected`'s support, and a chi-square test over it, with the tokens
    expected fewer than five times pooled into one bin: a peaked distribution gives tokens
    of probability 1e-5 whose single draw would otherwise decide the test."""
    support = expected > 0
    assert observed[~support].sum() == 0
    counts = expected / expected.sum() * observed.sum()
    small, large = support & (counts < 5), support & (counts >= 5)
    seen, wanted = observed[large], counts[large]
    if small.any():
        seen, wanted = (
            np.append(seen, observed[small].sum()),
            np.append(wanted, counts[small].sum()),
        )
    result = chisquare(seen, wanted)
    assert result.pvalue > 1e-3, result


def first_marginals(
    after: Callable[[list[int]], np.ndarray], prompt: Sequence[int], positions: int
) -> list[np.ndarray]:
    """The distribution of each of a generation's first `positions` tokens (1 to 3) under plain
    decoding, where `after(history)` is the next token's distribution after a history."""
    first = after(list(prompt))
    marginals = [first]
    if positions < 2:
        return marginals
    seconds = {a: after([*prompt, a]) for a in np.flatnonzero(first)}
    marginals.append(sum(first[a] * seconds[a] for a in seconds))
    if positions > 2:
        marginals.append(
            sum(
                first[a] * seconds[a][b] * after([*prompt, a, b])
                for a in seconds
                for b in np.flatnonzero(seconds[a])
            )
        )
    return marginals[:positions]
