"""Draft sources: where the γ proposed tokens of a round come from.

A draft model proposes tokens with the distribution q it drew them from; a
deterministic source (prompt lookup) proposes tokens with no distribution, which
verification treats as a point mass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from specrun.errors import OptionError
from specrun.runtime import Model
from specrun.sampling import SamplingParams, pick


@dataclass
class Proposal:
    tokens: list[int] = field(default_factory=list)
    probs: list[np.ndarray | None] = field(default_factory=list)  # q_i, or None for a point mass


class DraftSource(Protocol):
    name: str

    def prefill(self, ctx: Sequence[int]) -> None:
        """Take in the prompt before the first round (may do nothing)."""

    def propose(self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator) -> Proposal:
        """Propose up to n tokens to follow ctx."""


class ModelDraft:
    """A small model drafting with the target's sampling transform.

    Stops a round early when its own confidence in the next token (the probability
    of its top choice) falls below `p_min`, as llama.cpp's speculative example does.
    """

    def __init__(self, model: Model, target_vocab: int, p_min: float = 0.0) -> None:
        self.model = model
        self.name = model.name
        self.target_vocab = target_vocab
        self.p_min = p_min

    def prefill(self, ctx: Sequence[int]) -> None:
        self.model.logits(ctx, 0)

    def propose(self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator) -> Proposal:
        proposal = Proposal()
        seq = list(ctx)
        for _ in range(n):
            logits = self._fit_vocab(self.model.logits(seq, 1)[0])
            if self.p_min > 0 and _top_probability(logits) < self.p_min:
                break
            token, q = pick(logits, params, rng)
            proposal.tokens.append(token)
            proposal.probs.append(q)
            seq.append(token)
        return proposal

    def _fit_vocab(self, logits: np.ndarray) -> np.ndarray:
        """Vocabularies may differ by padding (<= 128 ids); ids beyond the target's are never proposed."""
        if len(logits) == self.target_vocab:
            return logits
        fitted = np.full(self.target_vocab, -np.inf, dtype=logits.dtype)
        n = min(len(logits), self.target_vocab)
        fitted[:n] = logits[:n]
        return fitted


def _top_probability(logits: np.ndarray) -> float:
    shifted = logits.astype(np.float64) - logits.max()
    return float(1.0 / np.exp(shifted).sum())


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


class HybridDraft:
    """Prompt lookup first, the draft model when the text offers no match."""

    def __init__(self, lookup: LookupDraft, model: ModelDraft) -> None:
        self.lookup = lookup
        self.model = model
        self.name = f"lookup+{model.name}"

    def prefill(self, ctx: Sequence[int]) -> None:
        self.lookup.prefill(ctx)
        self.model.prefill(ctx)

    def propose(self, ctx: Sequence[int], n: int, params: SamplingParams, rng: np.random.Generator) -> Proposal:
        proposal = self.lookup.propose(ctx, n, params, rng)
        return proposal if proposal.tokens else self.model.propose(ctx, n, params, rng)
