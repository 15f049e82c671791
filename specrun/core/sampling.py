"""Sampling math: logits -> probabilities, and the exact accept/resample rule.

numpy, no model; the sampling chain also in C (specrun/core/_sampling.c) where it was
compiled. The same transform produces both the target's `p` and the draft's `q`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import import_module
from typing import ClassVar, Protocol, cast, overload

import numpy as np
import numpy.typing as npt

from specrun.core.constraint import Constraint, ConstraintError
from specrun.errors import OptionError, SpecrunError


class _CompiledChain(Protocol):
    """The functions of specrun/core/_sampling.c (its method table). A row is float32 logits,
    with `ids` None a whole vocabulary's, else int32 candidates' ids; C-contiguous buffers."""

    def top_k(
        self, logits: npt.NDArray[np.float32], ids: npt.NDArray[np.int32] | None, k: int, /
    ) -> list[tuple[int, float]]:
        """The k best of a row, best first, ties to the lower id: (id, value) each."""
        ...

    def distribution(
        self,
        logits: npt.NDArray[np.float32],
        ids: npt.NDArray[np.int32] | None,
        k: int,
        top_p: float,
        min_p: float,
        temperature: float,
        out_ids: npt.NDArray[np.int64],
        out_probs: npt.NDArray[np.float64],
        /,
    ) -> int:
        """The chain on a row: writes the first `keep` of `out_ids` and `out_probs` (k each),
        returns keep; 0 where the row's best logit is not finite."""
        ...

    def verify_greedy(
        self,
        logits: npt.NDArray[np.float32],
        ids: npt.NDArray[np.int32] | None,
        drafts: npt.NDArray[np.int64],
        near_tie: float,
        /,
    ) -> tuple[int, int, list[bool]]:
        """`verify_greedy` on a round's rows [n + 1, width]."""
        ...

    def verify(
        self,
        logits: npt.NDArray[np.float32],
        ids: npt.NDArray[np.int32] | None,
        drafts: npt.NDArray[np.int64],
        q_at: npt.NDArray[np.int64],
        q_ids: npt.NDArray[np.int64],
        q_probs: npt.NDArray[np.float64],
        uniforms: npt.NDArray[np.float64],
        k: int,
        top_p: float,
        min_p: float,
        temperature: float,
        /,
    ) -> tuple[int, int]:
        """`verify`'s rule on a round's rows [n + 1, width]: draft i's q on
        q_ids/q_probs[q_at[i]:q_at[i + 1]], uniforms[i] deciding row i, uniforms[n] drawing
        the next token; accepted -1 where a row it read has no finite logit."""
        ...


_compiled: _CompiledChain | None
try:  # sampling's hot path in C (setup.py); the same in numpy where it was not compiled
    # A C extension has no types mypy can read: its functions are as _CompiledChain says.
    _compiled = cast(_CompiledChain, import_module("specrun.core._sampling"))
except ImportError:
    _compiled = None

# A top-two logit gap this small may flip between batch widths (specrun.core.exactness).
NEAR_TIE = 0.05
# The bound of a penalized logit: half float32's largest, so that the difference of two
# (the chain's x - x0, a row less its best) is finite too. A repeat penalty of 1e-300 lifts
# a repeated token here, as it would have lifted it past every other token.
LOGIT_LIMIT = float(np.finfo(np.float32).max) / 2


class NotFinite(SpecrunError):
    """A row whose best logit is NaN or infinite has no distribution: that one generation
    fails, rather than draw a token id from nothing and pass it to llama.cpp."""

    def __init__(self) -> None:
        super().__init__("the model's logits are not finite numbers here: cannot sample a token")


@dataclass(frozen=True)
class SamplingParams:
    """llama.cpp's defaults; temperature 0 means greedy (argmax). The checks name the
    command-line options because that is where bad values come from.

    Before the chain, a row's logits take `logit_bias` (token, bias) and the penalties for
    the last `penalty_last_n` tokens of the text before it (llama.cpp's: a repeated token's
    positive logit divided by `repeat_penalty`, a negative one multiplied; then less
    `frequency_penalty` per time it occurs and `presence_penalty` once), on every draft row
    and every verified row alike (`penalize`)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    repeat_penalty: float = 1.0  # 1 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    logit_bias: tuple[tuple[int, float], ...] = ()
    # The bias as one vector over a row, each instance's own once its first row is penalized
    # (the row's length is the vocabulary's): a row takes it in one add, however many tokens
    # it names. Not a field: not compared, not copied by `replace`, not in `asdict`.
    _bias_row: ClassVar[np.ndarray] = np.zeros(0)

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repeat_penalty"):
            if not math.isfinite(getattr(self, name)):  # every range below is finite
                raise OptionError(f"`{name}` must be a finite number, got {getattr(self, name)}")
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
        if not self.repeat_penalty > 0:
            raise OptionError(f"`repeat_penalty` must be > 0 (1 = off), got {self.repeat_penalty}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise OptionError(f"`{name}` must be between -2 and 2, got {getattr(self, name)}")
        if self.penalty_last_n < 0:
            raise OptionError(f"`penalty_last_n` must be >= 0, got {self.penalty_last_n}")
        for token, bias in self.logit_bias:
            if token < 0 or not -100 <= bias <= 100:
                raise OptionError(
                    f"`logit_bias` takes token ids >= 0 and biases from -100 to 100, "
                    f"got {token}: {bias}"
                )

    @property
    def penalized(self) -> bool:
        """Whether rows change before the chain (bias or penalties): then they are read whole."""
        repeats = self.repeat_penalty != 1 or self.presence_penalty or self.frequency_penalty
        return bool(self.logit_bias) or bool(repeats and self.penalty_last_n)

    def penalize(self, row: np.ndarray, history: Sequence[int]) -> None:
        """Apply the bias and the penalties to a whole row of logits, in place; `history` is
        the text before the row's position (prompt included). A penalized logit stays
        within +-LOGIT_LIMIT, whatever the penalties: finite, and so is the difference of
        two, which the chain takes."""
        if self.logit_bias:
            row += self._bias_of(len(row))
        repeats = self.repeat_penalty != 1 or self.presence_penalty or self.frequency_penalty
        if not (repeats and self.penalty_last_n and len(history)):
            return
        window = np.asarray(history[-self.penalty_last_n :])
        tokens, counts = np.unique(window[window < len(row)], return_counts=True)
        x = row[tokens].astype(np.float64)
        with np.errstate(over="ignore"):  # a penalty far from 1 overflows: the clip bounds it
            x = np.where(x <= 0, x * self.repeat_penalty, x / self.repeat_penalty)
        x -= counts * self.frequency_penalty + self.presence_penalty
        row[tokens] = x.clip(-LOGIT_LIMIT, LOGIT_LIMIT)

    def _bias_of(self, n_vocab: int) -> np.ndarray:
        """The bias of each token of a row of `n_vocab` (tokens past it are not in the row), in
        float32 as the row: a mixed add costs 15 times as much at a 49k vocabulary."""
        vector = self._bias_row
        if len(vector) != n_vocab:  # a race builds the same vector twice, harmlessly
            sums = np.zeros(n_vocab)
            for token, bias in self.logit_bias:
                if token < n_vocab:
                    sums[token] += bias
            vector = sums.astype(np.float32)
            object.__setattr__(self, "_bias_row", vector)
        return vector

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)

    def draws(self) -> Draws:
        """A generation's randomness: with a seed, keyed to positions (`PositionNoise`), so
        that the answer is plain decoding's whatever drafts it; else a stream."""
        return PositionNoise(self.seed) if self.seed is not None else self.rng()


@dataclass(frozen=True)
class Candidates:
    """One position's best tokens, as a model that samples on its device returns them
    (llama.cpp's backend top-k): their ids (int32) and logits (float32), in no particular
    order. Every other token ranks below them all, so a chain whose top-k keeps at most
    this many needs nothing more of the row."""

    ids: np.ndarray
    logits: np.ndarray


@dataclass(frozen=True)
class CandidateRows:
    """The candidates of each of a pass's positions: ids and logits [rows, width]."""

    ids: np.ndarray
    logits: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, row: int) -> Candidates:
        return Candidates(self.ids[row], self.logits[row])


# A position's logits: a whole vocabulary's row, or a device's candidates. A pass's: the same.
Row = np.ndarray | Candidates
Rows = np.ndarray | CandidateRows


def candidate_width(params: SamplingParams, n_vocab: int) -> int | None:
    """How many candidates a row needs under `params`: greedy, the best two (the choice
    and how near a tie it was); sampling, top-k's; None where the chain needs the whole
    row (top-k off or as wide as the vocabulary)."""
    if params.penalized:  # a penalty may lift a token into the best: whole rows
        return None
    if params.greedy:
        return 2
    return params.top_k if 0 < params.top_k < n_vocab else None


@dataclass(frozen=True)
class Distribution:
    """A sampling distribution on its support: token ids (int64) in ascending order and
    their probabilities; every other token has probability 0. Ascending ids sample as the
    dense vector would."""

    ids: np.ndarray
    probs: np.ndarray

    @classmethod
    def point_mass(cls, token: int) -> Distribution:
        """A proposal with no distribution (prompt lookup): all mass on its token."""
        return cls(np.array([token], np.int64), _ONE)

    @classmethod
    def of_dense(cls, probs: np.ndarray) -> Distribution:
        ids = np.flatnonzero(probs)
        return cls(ids, probs[ids].astype(np.float64))

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


_ONE = np.ones(1)
_ONE.flags.writeable = False  # shared by every point mass

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (uint64, wrapping): distinct inputs, independent-looking outputs."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed: np.ndarray = z ^ (z >> np.uint64(31))
    return mixed


class PositionNoise:
    """A seeded generation's randomness, a function of (seed, position, token) alone: an
    exponential variable E per token at each position of the sequence, SplitMix64's output
    for that key. A position's token is the exponential race, argmin E_i / p_i over the
    distribution's support, which is a draw from p (the Gumbel-max trick). The draft draws
    from its q with the same E, and verification commits at each row the target's own draw
    (`verify_seeded`): so a seeded answer is plain decoding's with that seed, whatever drafted
    it, at any γ, after any earlier request."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        # Any seed >= 0, however large, to 64 well-mixed bits.
        self._state = np.random.SeedSequence(seed).generate_state(1, np.uint64)

    def choose(self, dist: Distribution, position: int) -> int:
        """The token at `position` (its index in the sequence) drawn from `dist`."""
        with np.errstate(over="ignore"):  # the hash's arithmetic wraps, as it must
            at = _mix(self._state + np.uint64(position + 1) * _GOLDEN)
            bits = _mix(at + (dist.ids.astype(np.uint64) + np.uint64(1)) * _GOLDEN)
        uniform = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1)
        with np.errstate(divide="ignore"):  # a probability that underflowed never wins
            return int(dist.ids[np.argmin(-np.log(uniform) / dist.probs)])


# How a generation draws: a stream (accept/reject and residual draws, as they come), or a
# seeded generation's noise keyed to positions.
Draws = np.random.Generator | PositionNoise


def compiled() -> bool:
    """Whether the chain and verification run in C (specrun/core/_sampling.c, built by
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


def _chain_k(row: Row, params: SamplingParams) -> int:
    """Top-k's k for a row; a row of candidates must hold that many."""
    if isinstance(row, Candidates):
        k = params.top_k if params.top_k > 0 else len(row.ids) + 1
        if k > len(row.ids):
            raise ValueError(f"top-k {params.top_k} needs more than {len(row.ids)} candidates")
        return k
    return _top_k(params, row.shape[-1])


def _buffers(row: Row | Rows) -> tuple[np.ndarray, np.ndarray | None] | None:
    """A row's or a pass's (logits, ids) as the compiled code reads them, or None where it
    cannot (not compiled, or logits other than llama.cpp's float32)."""
    if _compiled is None:
        return None
    if isinstance(row, (Candidates, CandidateRows)):
        if row.logits.dtype != np.float32 or row.ids.dtype != np.int32:
            return None
        return np.ascontiguousarray(row.logits), np.ascontiguousarray(row.ids)
    return (np.ascontiguousarray(row), None) if row.dtype == np.float32 else None


def distribution(row: Row, params: SamplingParams) -> Distribution:
    """One row at temperature > 0: llama.cpp's chain top-k -> top-p -> min-p ->
    temperature, computed on the top-k candidates only (the whole vocabulary when top-k is
    off).

    specrun/core/_sampling.c computes the same, step for step (the sum aside, to rounding), on
    float32 rows (llama.cpp's): in numpy the chain's calls on ~40 numbers cost more than
    the pass over the row."""
    k = _chain_k(row, params)
    buffers = _buffers(row)
    if buffers is not None:
        assert _compiled is not None
        ids, probs = np.empty(k, np.int64), np.empty(k)
        keep = _compiled.distribution(
            *buffers, k, params.top_p, params.min_p, params.temperature, ids, probs
        )
        if keep == 0:
            raise NotFinite()
        return Distribution(ids[:keep], probs[:keep])
    if isinstance(row, Candidates):
        ids, x = row.ids.astype(np.int64), _nan_as_lowest(row.logits)
    else:
        row = _nan_as_lowest(row)
        ids = _top_k_ids(row, k) if k < len(row) else np.arange(len(row))
        x = row[ids]
    # Candidates best first, ties to the lower id; top-p and min-p look at untempered
    # probs: exp(x - x0) up to their sum. Methods rather than numpy's functions, which
    # add a wrapper to each call.
    order = np.lexsort((ids, -x))[:k]
    ids, x = ids[order], x[order].astype(np.float64)
    if not math.isfinite(x[0]):
        raise NotFinite()
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


def _nan_as_lowest(logits: np.ndarray) -> np.ndarray:
    """A NaN logit ranks as -inf, as in the compiled search."""
    return np.where(np.isnan(logits), -np.inf, logits).astype(logits.dtype, copy=False)


# How many of a row's best tokens are checked against a constraint before more are: a
# grammar's check costs per token, and the best few usually hold what it allows.
CONSTRAINED_WIDTHS = (64, 1024, 16_384)


def allowed_best(row: Row, k: int, constraint: Constraint) -> Candidates:
    """The k best tokens of a whole row that `constraint` allows (all it allows where fewer),
    ties to the lower id."""
    ids, logits, _ = _allowed_among_best(row, k, constraint)
    return Candidates(ids[:k].astype(np.int32), logits[:k].astype(np.float32))


def best_allowed(row: Row, constraint: Constraint) -> tuple[int, float]:
    """Greedy under a constraint: the best token it allows, and how far the next allowed one
    lies below it, at least (to the next allowed among those checked, else to the last
    checked: every token not checked ranks below it)."""
    ids, logits, lowest = _allowed_among_best(row, 1, constraint)
    return int(ids[0]), float(logits[0]) - float(logits[1] if len(ids) > 1 else lowest)


def _allowed_among_best(
    row: Row, enough: int, constraint: Constraint
) -> tuple[np.ndarray, np.ndarray, float]:
    """The allowed tokens among a row's best and their logits, best first (ties to
    the lower id), and the lowest logit checked (-inf once the whole row was). The row's
    best 64 are checked, then more, until `enough` are allowed: every token outside then
    ranks below those found, so they are the best allowed. That needs the whole row: a
    device's candidates may all be refused."""
    if isinstance(row, Candidates):
        raise ValueError("a constraint needs whole rows, not a device's candidates")
    n_vocab = len(row)
    for width in [*(w for w in CONSTRAINED_WIDTHS if w < n_vocab), n_vocab]:
        ids = _best_ids(row, width)
        allowed = ids[constraint.allows(ids)]
        if len(allowed) >= enough:
            break
    if not len(allowed):
        raise ConstraintError(
            "the grammar allows no token of the model's vocabulary where the answer has got to"
        )
    lowest = float(row[ids].min()) if width < n_vocab else -np.inf
    ranked = allowed[np.lexsort((allowed, -row[allowed]))]
    return ranked, row[ranked], lowest


def _best_ids(row: np.ndarray, width: int) -> np.ndarray:
    """The ids of a row's `width` best, ties to the lower id, in no particular order."""
    if width >= len(row):
        return np.arange(len(row))
    buffers = _buffers(row)
    if buffers is not None and width <= CONSTRAINED_WIDTHS[1]:
        assert _compiled is not None
        return np.array([token for token, _ in _compiled.top_k(*buffers, width)])
    return _top_k_ids(row, width)


def _under(row: Row, k: int, constraint: Constraint | None) -> Row:
    """The row a chain with top-k's `k` reads: the whole row, or under a constraint, the best
    k tokens it allows."""
    return row if constraint is None else allowed_best(row, k, constraint)


@dataclass(frozen=True)
class TokenLogprob:
    """A committed token's log-probability under the target's distribution at its position
    (the log-softmax of the row, after the bias and penalties, before temperature and the
    filters), and the `top` most likely tokens there with theirs, best first (ties to the
    lower id)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprob(row: np.ndarray, token: int, top: int = 0) -> TokenLogprob:
    """`token`'s TokenLogprob in a whole row of logits, with the `top` best (0-20)."""
    best = float(row.max())
    total = best + float(np.log(np.exp(row - best).sum(dtype=np.float64)))
    ranked = _best_ids(row, top) if top else np.empty(0, np.int64)
    ranked = ranked[np.lexsort((ranked, -row[ranked]))]
    return TokenLogprob(
        token,
        float(row[token]) - total,
        tuple((int(t), float(row[t]) - total) for t in ranked),
    )


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


def greedy_choice(row: Row) -> tuple[int, float]:
    """A row's best token (ties to the lower id, as numpy's argmax) and how far the
    next-best logit lies below it: under NEAR_TIE, a choice that a slightly different batch
    width could have flipped. One pass over the row: the compiled top 2, else numpy's."""
    buffers = _buffers(row)
    size = _width(row)
    if buffers is not None and size >= 2:
        assert _compiled is not None
        (best, value), (_, second) = _compiled.top_k(*buffers, 2)
        return best, value - second
    if isinstance(row, Candidates):
        order = np.lexsort((row.ids, -row.logits))
        gap = row.logits[order[0]] - row.logits[order[1]] if size >= 2 else np.inf
        return int(row.ids[order[0]]), float(gap)
    best = int(row.argmax())
    second = max(row[:best].max(initial=-np.inf), row[best + 1 :].max(initial=-np.inf))
    return best, float(row[best]) - float(second)


def verify_greedy(
    rows: Rows, draft_tokens: Sequence[int], constraint: Constraint | None = None
) -> tuple[int, int, list[bool]]:
    """`verify` at temperature 0: accept drafts while each is its row's best token (the
    best that `constraint` allows after the drafts before it). Also returns, for each row
    read (one per committed token), whether it was a near tie.

    Row by row, each read once (0.6 MB at a 152k vocabulary), and no row after the
    first rejection is read; compiled, in one call.
    """
    if len(rows) != len(draft_tokens) + 1:
        raise ValueError("need one target row per draft token plus the bonus")
    buffers = _buffers(rows)
    if buffers is not None and constraint is None:
        assert _compiled is not None
        return _compiled.verify_greedy(*buffers, np.array(draft_tokens, np.int64), NEAR_TIE)
    state = constraint.fork() if constraint is not None else None
    ties = []
    for i in range(len(rows)):
        best, gap = greedy_choice(rows[i]) if state is None else best_allowed(rows[i], state)
        if state is not None and i < len(draft_tokens) and best == draft_tokens[i]:
            state.accept(best)
        ties.append(gap < NEAR_TIE)
        if i == len(draft_tokens) or best != draft_tokens[i]:
            return i, best, ties
    raise AssertionError("the last row always decides")


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw an index from a probability vector (inverse CDF; robust to rounding)."""
    return _sample_at(probs, rng.random())


def _sample_at(probs: np.ndarray, u: float) -> int:
    """The index the inverse CDF gives at u in [0, 1)."""
    cdf = probs.cumsum()  # methods, as in `distribution`
    return min(int(cdf.searchsorted(u * cdf[-1], side="right")), len(cdf) - 1)


def pick(
    logits: Row,
    params: SamplingParams,
    rng: Draws,
    constraint: Constraint | None = None,
    position: int = 0,
) -> tuple[int, Distribution | None]:
    """Choose a token from one row (among those `constraint` allows); return it with its
    distribution (None when greedy). `position`, the token's index in the sequence, keys
    a seeded generation's `PositionNoise`."""
    if params.greedy:
        if constraint is not None:
            return best_allowed(logits, constraint)[0], None
        if isinstance(logits, Candidates):
            return greedy_choice(logits)[0], None
        return int(np.argmax(logits)), None
    if constraint is not None:
        logits = _under(logits, _top_k(params, _width(logits)), constraint)
    q = distribution_of(logits, params)
    return (rng.choose(q, position) if isinstance(rng, PositionNoise) else q.sample(rng)), q


def _width(row: Row) -> int:
    return len(row.ids) if isinstance(row, Candidates) else len(row)


def _top_k(params: SamplingParams, n_vocab: int) -> int:
    """How many tokens a distribution under `params` may keep: top-k's k, else all."""
    return params.top_k if 0 < params.top_k < n_vocab else n_vocab


def distribution_of(row: Row, params: SamplingParams) -> Distribution:
    """`distribution`, where a row of candidates may hold fewer than top-k's k (all a
    constraint allows): then the chain keeps what there is."""
    if isinstance(row, Candidates) and not 0 < params.top_k <= len(row.ids):
        params = replace(params, top_k=len(row.ids))
    return distribution(row, params)


def verify(
    target_logits: Rows,
    draft_tokens: Sequence[int],
    draft_probs: Sequence[Distribution | np.ndarray | None],
    params: SamplingParams,
    rng: np.random.Generator,
    constraint: Constraint | None = None,
) -> tuple[int, int]:
    """Accept a prefix of the drafted tokens and choose the token that follows it.

    `target_logits` has one row per drafted token plus one: row i holds the target's
    logits for position i of the draft, the last row the bonus position.
    `draft_probs[i]` is the draft distribution q_i that produced token i (a Distribution
    or a dense vector), or None for a deterministic proposal (prompt lookup), which is a
    point mass at the token.

    Returns (number accepted, next token). Greedy accepts d_i iff it is the target's
    best token; sampling accepts with probability min(1, p_i(d_i) / q_i(d_i)) and on the
    first rejection draws from norm(max(0, p_i - q_i)) (Leviathan et al. 2023). The round
    draws its n + 1 uniforms at once: u_i decides row i, u_n draws the token that follows
    (at a rejection or after the last row), independent of the decisions before it.
    Compiled, the rule is one call (sampling's `_compiled.verify`); `verify_reference`
    is the same in numpy, step for step. Under `constraint` (the committed text's state)
    p_i is the chain on the tokens it allows after the drafts before row i (row by row, in
    `verify_reference`).
    """
    n = len(draft_tokens)
    if len(target_logits) != n + 1:
        raise ValueError("need one target row per draft token plus the bonus")
    if params.greedy:
        return verify_greedy(target_logits, draft_tokens, constraint)[:2]
    uniforms = rng.random(n + 1)
    qs = [
        Distribution.point_mass(token)
        if q is None
        else (q if isinstance(q, Distribution) else Distribution.of_dense(q))
        for token, q in zip(draft_tokens, draft_probs)
    ]
    buffers = _buffers(target_logits)
    if buffers is None or constraint is not None:
        return verify_reference(target_logits, draft_tokens, qs, params, uniforms, constraint)
    assert _compiled is not None
    q_at = np.zeros(n + 1, np.int64)
    np.cumsum([len(q.ids) for q in qs], out=q_at[1:])
    accepted, token = _compiled.verify(
        *buffers,
        np.array(draft_tokens, np.int64),
        q_at,
        np.concatenate([q.ids for q in qs], dtype=np.int64) if qs else q_at[:0],
        np.concatenate([q.probs for q in qs], dtype=np.float64) if qs else uniforms[:0],
        uniforms,
        _chain_k(target_logits[0], params),
        params.top_p,
        params.min_p,
        params.temperature,
    )
    if accepted < 0:
        raise NotFinite()
    return accepted, token


def verify_reference(
    target_logits: Rows,
    draft_tokens: Sequence[int],
    qs: Sequence[Distribution],
    params: SamplingParams,
    uniforms: np.ndarray,
    constraint: Constraint | None = None,
) -> tuple[int, int]:
    """`verify`'s rule at temperature > 0 in numpy, row by row: p_i only for the rows the
    rule reaches; `uniforms` as `verify` draws them."""
    n = len(draft_tokens)
    state = constraint.fork() if constraint is not None else None
    k = _top_k(params, _width(target_logits[0])) if state is not None else 0

    def p_of(i: int) -> Distribution:
        return distribution_of(_under(target_logits[i], k, state), params)

    for i, (token, q) in enumerate(zip(draft_tokens, qs)):
        p = p_of(i)
        if uniforms[i] * q[token] < p[token]:
            if state is not None:
                state.accept(token)
            continue
        # max(0, p - q) is zero off p's support, so it is computed on that support.
        residual = np.maximum(p.probs - q[p.ids], 0.0)
        # Zero mass cannot happen after a rejection in exact arithmetic; rounding can.
        chosen = _sample_at(residual if residual.sum() > 0 else p.probs, uniforms[n])
        return i, int(p.ids[chosen])
    p = p_of(n)
    return n, int(p.ids[_sample_at(p.probs, uniforms[n])])


def verify_seeded(
    target_logits: Rows,
    draft_tokens: Sequence[int],
    params: SamplingParams,
    noise: PositionNoise,
    position: int,
    constraint: Constraint | None = None,
) -> tuple[int, int]:
    """`verify` for a seeded generation at temperature > 0, row 0 at sequence index
    `position`: each row's token is the target's own draw there (`PositionNoise.choose`), and
    the drafts are accepted while they are those tokens. The draft drew with the same noise,
    so it agrees where q is near p; what is committed is plain decoding's draw, distributed as
    p whatever the draft (a coupling that accepts somewhat less than `verify`'s rule, which
    keeps to no position: a seed then reproduces the answer only where every γ and draft
    repeats)."""
    n = len(draft_tokens)
    if len(target_logits) != n + 1:
        raise ValueError("need one target row per draft token plus the bonus")
    state = constraint.fork() if constraint is not None else None
    k = _top_k(params, _width(target_logits[0])) if state is not None else 0
    for i in range(n + 1):
        p = distribution_of(_under(target_logits[i], k, state), params)
        token = noise.choose(p, position + i)
        if i == n or token != draft_tokens[i]:
            return i, token
        if state is not None:
            state.accept(token)
    raise AssertionError("the last row always decides")
