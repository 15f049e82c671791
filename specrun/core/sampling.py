"""Sampling math: logits -> probabilities, and the exact accept/resample rule.

numpy, no model; the sampling chain also in C (specrun/core/_sampling.c) where it was
compiled. The same transform produces both the target's `p` and the draft's `q`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Protocol, cast, overload

import numpy as np
import numpy.typing as npt

from specrun.errors import OptionError


class _CompiledChain(Protocol):
    """The functions of specrun/core/_sampling.c, on C-contiguous rows (its method table)."""

    def top_k(self, logits: npt.NDArray[np.float32], k: int, /) -> list[tuple[int, float]]:
        """The k best of a row, best first, ties to the lower id: (id, value) each."""
        ...

    def distribution(
        self,
        logits: npt.NDArray[np.float32],
        k: int,
        top_p: float,
        min_p: float,
        temperature: float,
        ids: npt.NDArray[np.int64],
        probs: npt.NDArray[np.float64],
        /,
    ) -> int:
        """The chain on a row: writes the first `keep` of `ids` and `probs` (k each), returns
        keep."""
        ...


_compiled: _CompiledChain | None
try:  # sampling's hot path in C (setup.py); the same in numpy where it was not compiled
    # A C extension has no types mypy can read: its functions are as _CompiledChain says.
    _compiled = cast(_CompiledChain, import_module("specrun.core._sampling"))
except ImportError:
    _compiled = None

# A top-two logit gap this small may flip between batch widths (specrun.core.exactness).
NEAR_TIE = 0.05


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


@dataclass(frozen=True)
class Distribution:
    """A sampling distribution on its support: token ids in ascending order and their
    probabilities; every other token has probability 0. Ascending ids sample as the
    dense vector would."""

    ids: np.ndarray
    probs: np.ndarray

    @overload
    def __getitem__(self, tokens: int | np.integer) -> float: ...

    @overload
    def __getitem__(self, tokens: np.ndarray) -> np.ndarray: ...

    def __getitem__(self, tokens: int | np.integer | np.ndarray) -> float | np.ndarray:
        """The probability of a token, or of each of an array of tokens."""
        if isinstance(tokens, (int, np.integer)):  # verify's case, twice a row: one numpy call
            at = int(self.ids.searchsorted(tokens))
            return float(self.probs[at]) if at < len(self.ids) and self.ids[at] == tokens else 0.0
        where = np.minimum(np.searchsorted(self.ids, tokens), len(self.ids) - 1)
        return np.where(self.ids[where] == tokens, self.probs[where], 0.0)

    def sample(self, rng: np.random.Generator) -> int:
        return int(self.ids[sample(self.probs, rng)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out


def compiled() -> bool:
    """Whether `distribution` and `greedy_choice` run in C (specrun/core/_sampling.c, built by
    setup.py where a compiler is), rather than in numpy."""
    return _compiled is not None


def _top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest logits, ties to the lower id (as the compiled search),
    unordered: numpy's top-k search, in one pass over the vocabulary.

    Seen as a grid of k or more columns, the k-th largest column maximum bounds the k-th
    largest logit from below (k distinct elements reach it), and every logit that reaches
    it lies in a column whose maximum does: about k columns, so only they are searched.
    """
    rows = max(1, min(64, len(logits) // k))
    columns = len(logits) // rows
    grid = logits[: rows * columns].reshape(rows, columns)
    maxima = grid.max(axis=0)
    bound = np.partition(maxima, -k)[-k]
    reaching = np.flatnonzero(maxima >= bound)
    row, column = np.divmod(np.flatnonzero(grid[:, reaching] >= bound), len(reaching))
    ids = row * columns + reaching[column]
    tail = np.flatnonzero(logits[rows * columns :] >= bound)  # the few logits past the grid
    if len(tail):
        ids = np.concatenate([ids, tail + rows * columns])
    return ids if len(ids) == k else ids[np.lexsort((ids, -logits[ids]))[:k]]


def distribution(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """One row of logits at temperature > 0: llama.cpp's chain top-k -> top-p -> min-p ->
    temperature, computed on the top-k candidates only (the whole vocabulary when top-k is off).

    specrun/core/_sampling.c computes the same, step for step (the sum aside, to rounding), on
    float32 rows (llama.cpp's): in numpy the chain's calls on ~40 numbers cost more than
    the pass over the row."""
    n_vocab = logits.shape[-1]
    k = params.top_k if 0 < params.top_k < n_vocab else n_vocab
    if _compiled is not None and logits.dtype == np.float32:
        ids, probs = np.empty(k, np.int64), np.empty(k)
        keep = _compiled.distribution(
            np.ascontiguousarray(logits),
            k,
            params.top_p,
            params.min_p,
            params.temperature,
            ids,
            probs,
        )
        return Distribution(ids[:keep], probs[:keep])
    ids = _top_k_ids(logits, k) if k < n_vocab else np.arange(n_vocab)
    x = logits[ids]
    # Candidates best first, ties to the lower id; top-p and min-p look at untempered
    # probs: exp(x - x0) up to their sum. Methods rather than numpy's functions, which
    # add a wrapper to each call.
    order = np.lexsort((ids, -x))
    ids, x = ids[order], x[order].astype(np.float64)
    x -= x[0]
    base = np.exp(x)
    keep = len(ids)
    if params.top_p < 1:
        # Smallest prefix whose mass reaches top_p (always at least one token).
        cdf = base.cumsum()
        keep = min(keep, int(cdf.searchsorted(params.top_p * cdf[-1])) + 1)
    if params.min_p > 0:
        keep = min(keep, int(np.count_nonzero(base >= params.min_p)))  # base[0] is 1
    probs = np.exp(x[:keep] / params.temperature)
    probs /= probs.sum()
    by_id = ids[:keep].argsort()
    return Distribution(ids[:keep][by_id], probs[by_id])


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Logits [n_vocab] or [k, n_vocab] -> dense float64 probabilities of the same shape.

    Greedy gives a one-hot at the argmax, the limit of temperature -> 0.
    """
    rows = np.atleast_2d(logits)
    if params.greedy:
        out = np.zeros(rows.shape, dtype=np.float64)
        out[np.arange(len(rows)), rows.argmax(axis=1)] = 1.0
    else:
        out = np.stack([distribution(row, params).dense(rows.shape[-1]) for row in rows])
    return out.reshape(logits.shape)


def greedy_choice(row: np.ndarray) -> tuple[int, float]:
    """A row's argmax (its first occurrence, as numpy's argmax) and how far the next-best
    logit lies below it: under NEAR_TIE, a choice that a slightly different batch width
    could have flipped. One pass over the row: the compiled top 2 (best first, ties to
    the lower id), else numpy's argmax and the maxima around it."""
    if _compiled is None or row.dtype != np.float32 or len(row) < 2:
        best = int(row.argmax())
        second = max(row[:best].max(initial=-np.inf), row[best + 1 :].max(initial=-np.inf))
        return best, float(row[best]) - float(second)
    (best, value), (_, second) = _compiled.top_k(np.ascontiguousarray(row), 2)
    return best, value - second


def verify_greedy(
    target_logits: np.ndarray, draft_tokens: Sequence[int]
) -> tuple[int, int, list[bool]]:
    """`verify` at temperature 0: accept drafts while each is its row's argmax. Also
    returns, for each row read (one per committed token), whether it was a near tie.

    Row by row, each read once (0.6 MB at a 152k vocabulary), and no row after the
    first rejection is read.
    """
    ties = []
    for i, row in enumerate(target_logits):
        best, gap = greedy_choice(row)
        ties.append(gap < NEAR_TIE)
        if i == len(draft_tokens) or best != draft_tokens[i]:
            return i, best, ties
    raise ValueError("need one target row per draft token plus the bonus")


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw an index from a probability vector (inverse CDF; robust to rounding)."""
    cdf = probs.cumsum()  # methods, as in `distribution`
    return min(int(cdf.searchsorted(rng.random() * cdf[-1], side="right")), len(cdf) - 1)


def pick(
    logits: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> tuple[int, Distribution | None]:
    """Choose a token from one row of logits; return it with its distribution (None when greedy)."""
    if params.greedy:
        return int(np.argmax(logits)), None
    q = distribution(logits, params)
    return q.sample(rng), q


def verify(
    target_logits: np.ndarray,
    draft_tokens: Sequence[int],
    draft_probs: Sequence[Distribution | np.ndarray | None],
    params: SamplingParams,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Accept a prefix of the drafted tokens and choose the token that follows it.

    `target_logits` has one row per drafted token plus one: row i holds the target's
    logits for position i of the draft, the last row the bonus position.
    `draft_probs[i]` is the draft distribution q_i that produced token i (a Distribution
    or a dense vector), or None for a deterministic proposal (prompt lookup), which is a
    point mass at the token.

    Returns (number accepted, next token). Greedy accepts d_i iff it is the target's
    argmax; sampling accepts with probability min(1, p_i(d_i) / q_i(d_i)) and on the
    first rejection draws from norm(max(0, p_i - q_i)) (Leviathan et al. 2023).
    p_i is computed only for the rows the rule reaches.
    """
    n = len(draft_tokens)
    assert target_logits.shape[0] == n + 1, "need one target row per draft token plus the bonus"
    if params.greedy:
        return verify_greedy(target_logits, draft_tokens)[:2]

    for i, token in enumerate(draft_tokens):
        p = distribution(target_logits[i], params)
        q = draft_probs[i]
        q_token = 1.0 if q is None else q[token]
        if rng.random() * q_token < p[token]:
            continue
        # max(0, p - q) is zero off p's support, so it is computed on that support;
        # a point mass's residual is p without the proposed token.
        q_on_p = (p.ids == token) if q is None else q[p.ids]
        residual = np.maximum(p.probs - q_on_p, 0.0)
        # Zero mass cannot happen after a rejection in exact arithmetic; rounding can.
        return i, int(p.ids[sample(residual if residual.sum() > 0 else p.probs, rng)])
    return n, distribution(target_logits[n], params).sample(rng)
