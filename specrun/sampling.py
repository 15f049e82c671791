"""Sampling math: logits -> probabilities, and the exact accept/resample rule.

Pure numpy, no model. The same `probabilities` transform produces both the
target's `p` and the draft's `q`; if they differed, speculative sampling would no
longer reproduce the target's distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specrun.errors import OptionError


@dataclass(frozen=True)
class SamplingParams:
    """llama.cpp's defaults; temperature 0 means greedy (argmax). The checks name the
    command-line options because that is where bad values come from."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise OptionError(f"`temperature` must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise OptionError(f"`top_k` must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise OptionError(f"`top_p` must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise OptionError(f"`min_p` must be in [0, 1), got {self.min_p}")
        if self.seed is not None and self.seed < 0:  # numpy's generators take no negative seed
            raise OptionError(f"`seed` must be >= 0, got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _row_probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """One row: llama.cpp's chain order top-k -> top-p -> min-p -> temperature."""
    logits = logits.astype(np.float64, copy=False)
    n_vocab = logits.shape[-1]
    if 0 < params.top_k < n_vocab:
        candidates = np.argpartition(logits, -params.top_k)[-params.top_k :]
    else:
        candidates = np.arange(n_vocab)
    # Sort candidates by logit, best first; top-p and min-p look at untempered probs.
    candidates = candidates[np.argsort(-logits[candidates], kind="stable")]
    base = _softmax(logits[candidates])
    keep = len(candidates)
    if params.top_p < 1:
        # Smallest prefix whose mass reaches top_p (always at least one token).
        keep = min(keep, int(np.searchsorted(np.cumsum(base), params.top_p)) + 1)
    if params.min_p > 0:
        keep = min(keep, int(np.count_nonzero(base >= params.min_p * base[0])))
    kept = candidates[:keep]
    probs = np.zeros(n_vocab, dtype=np.float64)
    probs[kept] = _softmax(logits[kept] / params.temperature)
    return probs


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Logits [n_vocab] or [k, n_vocab] -> float64 probabilities of the same shape.

    Greedy gives a one-hot at the argmax, the limit of temperature -> 0.
    """
    rows = np.atleast_2d(logits)
    if params.greedy:
        out = np.zeros(rows.shape, dtype=np.float64)
        out[np.arange(len(rows)), rows.argmax(axis=1)] = 1.0
    else:
        out = np.stack([_row_probabilities(row, params) for row in rows])
    return out.reshape(logits.shape)


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw a token id from a probability vector (inverse CDF; robust to rounding)."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(cdf) - 1))


def pick(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> tuple[int, np.ndarray | None]:
    """Choose a token from one row of logits; return it with its distribution (None when greedy)."""
    if params.greedy:
        return int(np.argmax(logits)), None
    probs = probabilities(logits, params)
    return sample(probs, rng), probs


def verify(
    target_logits: np.ndarray,
    draft_tokens: Sequence[int],
    draft_probs: Sequence[np.ndarray | None],
    params: SamplingParams,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Accept a prefix of the drafted tokens and choose the token that follows it.

    `target_logits` has one row per drafted token plus one: row i holds the target's
    logits for position i of the draft, the last row the bonus position.
    `draft_probs[i]` is the draft distribution q_i that produced token i, or None for
    a deterministic proposal (prompt lookup), which is a point mass at the token.

    Returns (number accepted, next token). Greedy accepts d_i iff it is the target's
    argmax; sampling accepts with probability min(1, p_i(d_i) / q_i(d_i)) and on the
    first rejection draws from norm(max(0, p_i - q_i)) (Leviathan et al. 2023).
    """
    n = len(draft_tokens)
    assert target_logits.shape[0] == n + 1, "need one target row per draft token plus the bonus"
    if params.greedy:
        best = target_logits.argmax(axis=1)
        for i, token in enumerate(draft_tokens):
            if best[i] != token:
                return i, int(best[i])
        return n, int(best[n])

    p = probabilities(target_logits, params)
    for i, token in enumerate(draft_tokens):
        q = draft_probs[i]
        q_token = 1.0 if q is None else q[token]
        if rng.random() * q_token < p[i, token]:
            continue
        if q is None:  # point mass: max(0, p - onehot) is p without the proposed token
            residual = p[i].copy()
            residual[token] = 0.0
        else:
            residual = np.maximum(p[i] - q, 0.0)
        # Zero mass cannot happen after a rejection in exact arithmetic; rounding can.
        return i, sample(residual if residual.sum() > 0 else p[i], rng)
    return n, sample(p[n], rng)
