"""Sampled output held to a distribution: a chi-square test of observed counts against the
probabilities expected, and the marginals of a generation's first tokens under plain
decoding."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

# scipy.special rather than scipy.stats, whose import alone takes about a second of the unit
# tier's few: the test is scipy.stats.chisquare's (Pearson's statistic, k - 1 degrees of
# freedom), its p-value the chi-square distribution's survival function.
from scipy.special import chdtrc

# Every test is seeded, so deterministic: a right rule passes at this floor, a wrong one
# fails by far.
P_VALUE_FLOOR = 1e-3


def assert_distributed(observed: np.ndarray, expected: np.ndarray) -> None:
    """Nothing outside `expected`'s support, and a chi-square test over it, with the tokens
    expected fewer than five times pooled into one bin: a peaked distribution gives tokens
    of probability 1e-5 whose single draw would otherwise decide the test. A support of one
    token is decided by the first check alone."""
    support = expected > 0
    assert observed[~support].sum() == 0, "a token outside the expected support was drawn"
    if support.sum() == 1:
        return
    counts = expected / expected.sum() * observed.sum()
    small, large = support & (counts < 5), support & (counts >= 5)
    seen, wanted = observed[large], counts[large]
    if small.any():
        seen, wanted = (
            np.append(seen, observed[small].sum()),
            np.append(wanted, counts[small].sum()),
        )
    statistic = float(((seen - wanted) ** 2 / wanted).sum())
    pvalue = float(chdtrc(len(seen) - 1, statistic))
    assert pvalue > P_VALUE_FLOOR, (
        f"not distributed as expected: chi-square {statistic:.1f} on {len(seen) - 1} "
        f"degrees of freedom, p = {pvalue:.2e}"
    )


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
