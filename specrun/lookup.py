"""Prompt lookup: draft tokens copied from earlier in the text, free to compute.

Its proposals carry no distribution: verification treats each as a point mass.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specrun.drafting import Proposal
from specrun.errors import OptionError
from specrun.sampling import SamplingParams


class LookupDraft:
    """Prompt lookup: propose what followed the most recent earlier occurrence of the
    last n tokens (n from `ngram_max` down to `ngram_min`) in the prompt and the answer.
    Single-token matches are mostly wrong, and a rejected proposal still widens the
    verify, so by default a match needs two tokens.

    Free to compute, so it pays wherever answers repeat their input: code edits,
    extraction, quoting summaries. An index of n-gram -> where its continuation
    starts grows with the sequence, so a round costs O(new tokens).
    """

    name = "lookup"

    def __init__(self, ngram_max: int = 3, ngram_min: int = 2, max_tokens: int = 10) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise OptionError(f"`min_ngram` ({ngram_min}) must lie in 1..`ngram` ({ngram_max})")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self.max_tokens = max_tokens
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def prefill(self, ctx: Sequence[int]) -> None:
        self._update(ctx)

    def _update(self, ctx: Sequence[int]) -> None:
        """Index every n-gram of ctx that has a continuation (all but the last position)."""
        seen = len(self._seen)
        if list(ctx[:seen]) != self._seen:  # a new conversation or an edited one: start over
            self._seen, self._index, seen = [], {}, 0
        for end in range(max(seen - 1, 0), len(ctx) - 1):  # n-grams ending at `end`
            for n in range(self.ngram_min, self.ngram_max + 1):
                if end + 1 >= n:
                    self._index[tuple(ctx[end + 1 - n : end + 1])] = end + 1
        self._seen = list(ctx)

    def propose(self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator) -> Proposal:
        self._update(ctx)
        n = min(n, self.max_tokens)
        for size in range(min(self.ngram_max, len(ctx)), self.ngram_min - 1, -1):
            start = self._index.get(tuple(ctx[len(ctx) - size :]))
            if start is not None:
                tokens = list(ctx[start : start + n])
                return Proposal(tokens, [None] * len(tokens))  # point masses
        return Proposal()
