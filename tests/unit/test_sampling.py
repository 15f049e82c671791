"""The sampling math, without a model: the transform, and that speculative sampling
reproduces the target's distribution exactly (chi-square over many seeded draws).

Each chi-square test verifies DRAWS rounds, one `verify` call each, the rounds' drafts drawn
at once: at p > 1e-3 over up to 20 tokens, 20,000 draws detect with power 0.99 a departure
from the target of Cohen's w = 0.055 (resampling from p rather than the residual departs by
0.27 to 0.30 in the ordinary draft's test)."""

from __future__ import annotations

import numpy as np
import pytest

from specrun.core import sampling
from specrun.core.sampling import (
    CandidateRows,
    Candidates,
    Distribution,
    PositionNoise,
    SamplingParams,
    _top_k_ids,
    distribution,
    pick,
    probabilities,
    sample,
    verify,
    verify_greedy,
    verify_reference,
    verify_seeded,
)
from specrun.errors import SpecrunError
from tests.support.distribution import assert_distributed

DRAWS = 20_000


def top_candidates(rows: np.ndarray, width: int, seed: int = 0) -> CandidateRows:
    """What a device's top-k leaves of each row: its `width` best (ties to the lower id),
    in no particular order."""
    rows = np.atleast_2d(rows)
    # Each row's width-th best logit: every id above it, then the lowest ids equal to it
    # (a partition, not a sort: the rounds below take thousands of rows).
    kth = -np.partition(-rows, width - 1, axis=1)[:, width - 1 : width]
    above, tied = rows > kth, rows == kth
    room = width - above.sum(axis=1, keepdims=True)
    best = np.nonzero(above | (tied & (tied.cumsum(axis=1) <= room)))[1].reshape(-1, width)
    ids = np.random.default_rng(seed).permuted(best, axis=1).astype(np.int32)
    return CandidateRows(ids, np.take_along_axis(rows, ids, axis=1))


def drawn(q: Distribution, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Drafts from q, as many as `shape` holds, in one call: a draft model's draws."""
    return q.ids[rng.choice(len(q.ids), size=shape, p=q.probs)]


def first_token_counts(
    p_logits, q_logits, params, n_drafts, seed, proposal="model", candidates=None
):
    """Run the accept/resample rule DRAWS times; count the first committed token. With
    `candidates`, the target's rows and the draft's q come from that many candidates per
    row, as from a device's sampler."""
    rng = np.random.default_rng(seed)
    n_vocab = p_logits.shape[-1]
    target_rows = np.tile(p_logits, (n_drafts + 1, 1))
    q = distribution(top_candidates(q_logits, candidates)[0] if candidates else q_logits, params)
    if candidates:
        target_rows = top_candidates(target_rows, candidates)
    if proposal == "model":
        rounds = drawn(q, rng, (DRAWS, n_drafts)).tolist()
        qs = [q] * n_drafts
    else:  # a deterministic proposal (prompt lookup): always the same token, no q
        rounds = [[int(np.argmax(q_logits))] * n_drafts] * DRAWS
        qs = [None] * n_drafts
    firsts = []
    for drafts in rounds:
        accepted, next_token = verify(target_rows, drafts, qs, params, rng)
        firsts.append(drafts[0] if accepted > 0 else next_token)
    return np.bincount(firsts, minlength=n_vocab)


PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
FILTERED = SamplingParams(temperature=0.7, top_k=12, top_p=0.9, min_p=0.02)


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "top-k/top-p/min-p"])
@pytest.mark.parametrize("n_drafts", [1, 3])
def test_ordinary_draft_reproduces_target(params, n_drafts):
    rng = np.random.default_rng(7)
    # float32, as llama.cpp's logits are: the compiled chain and rule (float64: numpy's; the
    # numpy rule is held to the compiled one decision for decision below, and tested by
    # chi-square under a constraint)
    p_logits = rng.normal(0, 1.5, 20).astype(np.float32)
    q_logits = p_logits + rng.normal(0, 1.0, 20).astype(np.float32)
    counts = first_token_counts(p_logits, q_logits, params, n_drafts, seed=11)
    assert_distributed(counts, probabilities(p_logits, params))


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "top-k/top-p/min-p"])
def test_draft_equal_to_target_is_always_accepted(params):
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 1.0, 16).astype(np.float32)  # float32: the compiled rule, as above
    q = probabilities(logits, params)
    draws = np.random.default_rng(5)
    for _ in range(500):
        drafts = [sample(q, draws) for _ in range(4)]
        accepted, _ = verify(np.tile(logits, (5, 1)), drafts, [q] * 4, params, draws)
        assert accepted == 4
    assert_distributed(
        first_token_counts(logits, logits, params, 2, seed=1), probabilities(logits, params)
    )


def test_disjoint_draft_is_always_rejected_and_resampled_from_target():
    p_logits = np.array([2.0, 1.0, 0.5, 0.0] + [-np.inf] * 4, np.float32)
    q_logits = np.array([-np.inf] * 4 + [0.0, 1.0, 0.3, 0.2], np.float32)
    rng = np.random.default_rng(0)
    q = probabilities(q_logits, PLAIN)
    for _ in range(200):
        accepted, token = verify(np.tile(p_logits, (2, 1)), [sample(q, rng)], [q], PLAIN, rng)
        assert accepted == 0 and token < 4
    assert_distributed(
        first_token_counts(p_logits, q_logits, PLAIN, 1, seed=2), probabilities(p_logits, PLAIN)
    )


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "top-k/top-p/min-p"])
@pytest.mark.parametrize("proposed", ["likely", "unlikely"])
def test_point_mass_proposal_reproduces_target(params, proposed):
    """A lookup draft has no q: accept with p(d), else resample from p without d."""
    rng = np.random.default_rng(9)
    p_logits = rng.normal(0, 1.5, 20).astype(np.float32)
    # The "draft logits" only choose which token the deterministic proposal is.
    chooser = p_logits.copy() if proposed == "likely" else -p_logits
    counts = first_token_counts(p_logits, chooser, params, 2, seed=4, proposal="lookup")
    assert_distributed(counts, probabilities(p_logits, params))


def test_greedy_accepts_the_prefix_matching_the_targets_argmax():
    rows = np.zeros((4, 6))
    rows[0, 2] = rows[1, 4] = rows[2, 1] = rows[3, 5] = 5.0
    greedy = SamplingParams(temperature=0)
    rng = np.random.default_rng(0)
    assert verify(rows, [2, 4, 1], [None] * 3, greedy, rng) == (3, 5)  # all accepted + bonus
    assert verify(rows, [2, 3, 1], [None] * 3, greedy, rng) == (1, 4)  # rejected at 2, corrected
    assert verify(rows[:1], [], [], greedy, rng) == (0, 2)  # γ = 0 is plain decoding


def test_transform_applies_each_filter():
    logits = np.log(np.array([0.4, 0.3, 0.15, 0.1, 0.05]))
    top_k = probabilities(logits, SamplingParams(temperature=1, top_k=2, top_p=1, min_p=0))
    np.testing.assert_allclose(top_k, [0.4 / 0.7, 0.3 / 0.7, 0, 0, 0])
    top_p = probabilities(logits, SamplingParams(temperature=1, top_k=0, top_p=0.8, min_p=0))
    assert np.count_nonzero(top_p) == 3  # 0.4 + 0.3 < 0.8 <= 0.4 + 0.3 + 0.15
    min_p = probabilities(logits, SamplingParams(temperature=1, top_k=0, top_p=1, min_p=0.3))
    assert np.count_nonzero(min_p) == 3  # kept: p >= 0.3 * 0.4
    hot = probabilities(logits, SamplingParams(temperature=2, top_k=0, top_p=1, min_p=0))
    np.testing.assert_allclose(
        hot / hot.sum(),
        np.sqrt([0.4, 0.3, 0.15, 0.1, 0.05]) / np.sqrt([0.4, 0.3, 0.15, 0.1, 0.05]).sum(),
    )
    greedy = probabilities(logits, SamplingParams(temperature=0))
    np.testing.assert_array_equal(greedy, [1, 0, 0, 0, 0])


def test_seeded_runs_are_reproducible():
    logits = np.random.default_rng(1).normal(size=50)
    params = SamplingParams(temperature=0.9, seed=42)
    first = [pick(logits, params, rng)[0] for rng in [params.rng()] for _ in range(20)]
    second = [pick(logits, params, rng)[0] for rng in [params.rng()] for _ in range(20)]
    assert first == second


def test_residual_rounding_to_zero_does_not_divide_by_zero():
    # q slightly above p everywhere by rounding: the residual has no mass; fall back to p.
    p_logits = np.log(np.array([0.5, 0.5]))
    q = np.array([0.5 + 1e-17, 0.5 + 1e-17])
    rng = np.random.default_rng(0)
    for _ in range(50):
        accepted, token = verify(np.tile(p_logits, (2, 1)), [0], [q], PLAIN, rng)
        assert token in (0, 1)


@pytest.mark.parametrize(
    "bad", [dict(temperature=-1), dict(top_k=-1), dict(top_p=0), dict(min_p=1.0)]
)
def test_invalid_sampling_values_are_user_errors(bad):
    with pytest.raises(SpecrunError):
        SamplingParams(**bad)


def top_k_compiled(logits, k):
    ids, values = map(np.array, zip(*sampling._compiled.top_k(logits, None, k)))
    np.testing.assert_array_equal(values, logits[ids])
    return ids


TOP_K_SEARCHES = [pytest.param(top_k_compiled, id="compiled"), pytest.param(_top_k_ids, id="numpy")]


def ranked(logits):
    """Ids best first, ties to the lower id: the order both searches promise."""
    return np.lexsort((np.arange(len(logits)), -logits))


def test_the_compiled_sampling_is_built():
    """setup.py builds it as optional, so an install goes on without it; here it must be there."""
    assert sampling.compiled(), (
        "specrun/core/_sampling.c did not compile: run `pip install -e .` and read its output"
    )


@pytest.mark.parametrize("search", TOP_K_SEARCHES)
@pytest.mark.parametrize("n_vocab, k", [(20, 12), (341, 40), (152_064, 40), (49_157, 1), (37, 37)])
def test_top_k_candidates_are_the_k_largest(search, n_vocab, k):
    logits = np.random.default_rng(n_vocab).normal(size=n_vocab).astype(np.float32)
    assert set(search(logits, k)) == set(np.argsort(logits)[-k:])


@pytest.mark.parametrize("search", TOP_K_SEARCHES)
def test_top_k_candidates_at_the_end_and_among_ties(search):
    """The last few logits lie past the numpy search's grid and the compiled one's last
    whole block; ties go to the lower ids; -inf (a masked token) is no better than any logit."""
    logits = np.random.default_rng(0).normal(size=152_069).astype(np.float32)
    logits[-3:] = 9.0  # past 64 rows x 2376 columns, and past 2376 blocks of 64
    assert {152_066, 152_067, 152_068} <= set(search(logits, 40))
    tied = np.zeros(1000, dtype=np.float32)
    tied[[3, 500, 998]] = 1.0
    assert set(search(tied, 5)) == {3, 500, 998, 0, 1}
    rounded = np.round(np.random.default_rng(1).normal(size=5000), 1).astype(
        np.float32
    )  # ties everywhere
    for k in (1, 7, 40):
        assert set(search(rounded, k)) == set(ranked(rounded)[:k])
    masked = np.full(100, -np.inf, dtype=np.float32)
    masked[[7, 70]] = [-30.0, 2.0]
    assert set(search(masked, 2)) == {7, 70}
    assert set(search(masked, 4)) == {7, 70, 0, 1}


def test_the_compiled_top_k_is_ranked_and_refuses_wrong_sizes():
    logits = np.round(np.random.default_rng(3).normal(size=5000), 1).astype(np.float32)
    np.testing.assert_array_equal(top_k_compiled(logits, 60), ranked(logits)[:60])
    with pytest.raises(ValueError, match="need 1 <= k"):
        sampling._compiled.top_k(logits[:5], None, 6)
    with pytest.raises(ValueError, match="need 1 <= k"):
        sampling._compiled.top_k(logits, None, 0)
    with pytest.raises(ValueError, match="must hold k = 10"):
        sampling._compiled.distribution(
            logits, None, 10, 0.9, 0.05, 0.8, np.empty(9, np.int64), np.empty(10)
        )
    with pytest.raises(ValueError, match="temperature > 0"):
        sampling._compiled.distribution(
            logits, None, 10, 0.9, 0.05, 0.0, np.empty(10, np.int64), np.empty(10)
        )
    # Another dtype than the C reads is refused, not misread.
    with pytest.raises(ValueError, match="rows must be floats of 4 bytes"):
        sampling._compiled.top_k(logits.astype(np.float64), None, 3)
    with pytest.raises(ValueError, match="ids must be integers of 4 bytes"):
        sampling._compiled.top_k(logits[:8], np.arange(8), 3)
    with pytest.raises(ValueError, match="one id per logit"):
        sampling._compiled.top_k(logits[:8], np.arange(7, dtype=np.int32), 3)


CHAINS = [
    SamplingParams(temperature=0.8),  # llama.cpp's defaults
    SamplingParams(temperature=1.3, top_k=100, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.5, top_k=7, top_p=0.5, min_p=0.2),
    SamplingParams(
        temperature=1.0, top_k=0, top_p=0.9, min_p=0.0
    ),  # top-k off: the whole vocabulary
    SamplingParams(temperature=2.0, top_k=1),
]


@pytest.mark.parametrize(
    "params", CHAINS, ids=lambda p: f"T{p.temperature}-k{p.top_k}-p{p.top_p}-m{p.min_p}"
)
def test_the_compiled_chain_is_numpys(params, monkeypatch):
    """specrun/core/_sampling.c and the numpy chain: the same support and the same
    probabilities to rounding, on rows with and without ties and masked tokens."""
    rng = np.random.default_rng(8)
    rows = [rng.normal(0, 2, 3000), np.round(rng.normal(0, 2, 3000), 1), rng.normal(0, 2, 152_064)]
    rows[1][rng.integers(0, 3000, 500)] = -np.inf
    rows = [row.astype(np.float32) for row in rows]
    compiled = [distribution(row, params) for row in rows]
    monkeypatch.setattr(sampling, "_compiled", None)
    for row, c in zip(rows, compiled):
        n = distribution(row, params)
        np.testing.assert_array_equal(c.ids, n.ids)
        np.testing.assert_allclose(c.probs, n.probs, rtol=1e-12)
        assert abs(c.probs.sum() - 1) < 1e-12


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "top-k/top-p/min-p"])
def test_a_draft_distribution_verifies_as_its_dense_vector(params):
    """The sparse q (the draft's) and its dense vector: the same draws, token for token."""
    rng = np.random.default_rng(5)
    p_logits, q_logits = rng.normal(0, 1.5, (3, 30)), rng.normal(0, 1.5, (2, 30))
    qs = [distribution(row, params) for row in q_logits]
    dense = [q.dense(30) for q in qs]
    np.testing.assert_allclose(dense, probabilities(q_logits, params))
    sparse_rng, dense_rng = np.random.default_rng(1), np.random.default_rng(1)
    for _ in range(300):
        drafts = [q.sample(sparse_rng) for q in qs]
        assert drafts == [sample(q, dense_rng) for q in dense]
        assert verify(p_logits, drafts, qs, params, sparse_rng) == verify(
            p_logits, drafts, dense, params, dense_rng
        )


def test_candidates_give_the_rows_distribution(monkeypatch):
    """A device's top-k candidates and the whole row: the same p, compiled and in numpy,
    for any chain whose top-k keeps no more than the candidates; fewer is an error."""
    rng = np.random.default_rng(12)
    rows = [rng.normal(0, 2, 152_064), np.round(rng.normal(0, 2, 3000), 1)]
    rows = [row.astype(np.float32) for row in rows]
    for params in [p for p in CHAINS if p.top_k]:
        for row in rows:
            candidates = top_candidates(row, params.top_k, seed=params.top_k)[0]
            for compiled in (sampling._compiled, None):
                monkeypatch.setattr(sampling, "_compiled", compiled)
                whole, top = distribution(row, params), distribution(candidates, params)
                np.testing.assert_array_equal(whole.ids, top.ids)
                np.testing.assert_allclose(whole.probs, top.probs, rtol=1e-12)
    with pytest.raises(ValueError, match="needs more than 5 candidates"):
        distribution(top_candidates(rows[1], 5)[0], SamplingParams(top_k=6))
    with pytest.raises(ValueError, match="needs more than 5 candidates"):
        distribution(top_candidates(rows[1], 5)[0], SamplingParams(top_k=0))


@pytest.mark.parametrize("params", [FILTERED, SamplingParams(temperature=1.2, top_k=5)])
def test_candidate_rows_reproduce_target(params):
    """The chi-square test on rows and drafts made from a device's candidates alone."""
    rng = np.random.default_rng(21)
    p_logits = rng.normal(0, 1.5, 30).astype(np.float32)
    q_logits = p_logits + rng.normal(0, 1.0, 30).astype(np.float32)
    counts = first_token_counts(p_logits, q_logits, params, 3, seed=5, candidates=params.top_k)
    assert_distributed(counts, probabilities(p_logits, params))


def random_rounds(params, candidates, seed, rounds=300, n_vocab=3000):
    """Rounds of target rows, drafts and their q's, some drafts a lookup's point mass."""
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        n = int(rng.integers(0, 9))
        rows = rng.normal(0, 2, (n + 1, n_vocab)).astype(np.float32)
        if rng.random() < 0.3:  # rows with ties: the order among equals matters
            rows = np.round(rows, 0)
        q_rows = rows[:n] + rng.normal(0, 1, (n, n_vocab)).astype(np.float32)
        target = top_candidates(rows, candidates, seed=n) if candidates else rows
        drafts, qs = [], []
        for row, q_row in zip(rows, q_rows):
            if params.greedy:  # mostly the target's own choice, so that prefixes are accepted
                chosen = rng.random() < 0.7
                drafts.append(int(np.argmax(row)) if chosen else int(rng.integers(0, n_vocab)))
                qs.append(None)
            elif rng.random() < 0.2:
                drafts.append(int(rng.integers(0, n_vocab)))
                qs.append(None)
            else:
                token, q = pick(q_row, params, rng)
                drafts.append(token)
                qs.append(q)
        yield target, drafts, qs


@pytest.mark.parametrize("candidates", [None, 40], ids=["whole rows", "candidates"])
@pytest.mark.parametrize("params", CHAINS[:3], ids=["defaults", "k100", "k7"])
def test_the_compiled_verify_is_the_reference(params, candidates, monkeypatch):
    """One compiled call per round and the numpy rule, row by row: the same decisions and
    the same token from the same uniforms, on whole rows and on a device's candidates."""
    if candidates and candidates < params.top_k:
        candidates = params.top_k
    for seed, (rows, drafts, qs) in enumerate(random_rounds(params, candidates, seed=3)):
        compiled = verify(rows, drafts, qs, params, np.random.default_rng(seed))
        uniforms = np.random.default_rng(seed).random(len(drafts) + 1)
        points = [Distribution.point_mass(d) if q is None else q for d, q in zip(drafts, qs)]
        with monkeypatch.context() as numpy_only:
            numpy_only.setattr(sampling, "_compiled", None)
            assert compiled == verify_reference(rows, drafts, points, params, uniforms)


@pytest.mark.parametrize("candidates", [None, 2], ids=["whole rows", "candidates"])
def test_the_compiled_greedy_verify_is_the_reference(candidates, monkeypatch):
    """Greedy: the same accepted prefix, next token and near ties, compiled and in numpy,
    with ties among the logits (the lower id wins)."""
    accepted = []
    for rows, drafts, _ in random_rounds(SamplingParams(temperature=0), candidates, seed=4):
        compiled = verify_greedy(rows, drafts)
        with monkeypatch.context() as numpy_only:
            numpy_only.setattr(sampling, "_compiled", None)
            assert compiled == verify_greedy(rows, drafts)
        accepted.append(compiled[0])
    assert 0 < np.mean(accepted) < 8  # prefixes of every length were accepted
    rows = np.zeros((3, 10), np.float32)
    rows[:, 4] = rows[:, 6] = 1.0  # a tie: the lower id is the choice, and a near tie
    assert verify_greedy(rows, [4, 4]) == (2, 4, [True, True, True])
    assert verify_greedy(top_candidates(rows[:2], 2), [6]) == (0, 4, [True])
    tied = Candidates(np.array([9, 3], np.int32), np.ones(2, np.float32))
    assert pick(tied, SamplingParams(temperature=0), np.random.default_rng())[0] == 3


class Alternating:
    """A constraint whose allowed tokens depend on its state: at an even position of the
    text only even ids, at an odd one only odd ids, and never the ids in `banned`. Its two
    masks over the vocabulary are built once: a round checks tokens many times."""

    def __init__(self, masks: tuple[np.ndarray, np.ndarray], position: int = 0) -> None:
        self.masks, self.position = masks, position

    @classmethod
    def over(cls, n_vocab: int, banned: tuple[int, ...] = (2, 3)) -> Alternating:
        ids = np.arange(n_vocab)
        even, odd = [(ids % 2 == parity) & ~np.isin(ids, banned) for parity in (0, 1)]
        return cls((even, odd))

    def allows(self, tokens):
        return self.masks[self.position % 2][tokens]

    def accept(self, token):
        assert self.allows(token), "a token it refuses was taken"
        self.position += 1

    def fork(self):
        return Alternating(self.masks, self.position)


def masked(logits: np.ndarray, constraint) -> np.ndarray:
    out = np.full_like(logits, -np.inf)
    allowed = constraint.allows(np.arange(len(logits)))
    out[allowed] = logits[allowed]
    return out


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "top-k/top-p/min-p"])
@pytest.mark.parametrize("proposal", ["model", "lookup"])
def test_constrained_speculation_reproduces_the_constrained_target(params, proposal):
    """Under a constraint, drafts drawn among the tokens it allows, verified row by row under
    the state after the drafts before: the first two committed tokens follow the constrained
    target's distributions (the second after the first), and nothing refused is produced.

    Alternating's state is its position, so a position's draft distribution under it is the
    same in every round: taken once from `pick`, then all rounds' drafts drawn at once."""
    rng = np.random.default_rng(17)
    n_vocab = 24
    p_logits = rng.normal(0, 1.5, (3, n_vocab)).astype(np.float32)
    q_logits = (p_logits + rng.normal(0, 1.0, (3, n_vocab))).astype(np.float32)
    draws = np.random.default_rng(3)
    start = Alternating.over(n_vocab)
    state, columns, qs = start.fork(), [], []
    for i in range(2):
        if proposal == "model":
            token, q = pick(q_logits[i], params, draws, state)
            assert q is not None and state.allows(q.ids).all()
            columns.append(drawn(q, draws, (DRAWS,)))
        else:  # a deterministic proposal: the draft row's best allowed token
            token, q = int(np.argmax(masked(q_logits[i], state))), None
            columns.append(np.full(DRAWS, token))
        qs.append(q)
        state.accept(token)
    first, second = [], []
    for drafts in np.stack(columns, axis=1).tolist():
        accepted, token = verify(p_logits, drafts, qs, params, draws, start)
        committed = [*drafts[:accepted], token]
        first.append(committed[0])
        if len(committed) > 1:
            second.append(committed[1])
    after = start.fork()
    expected_first = probabilities(masked(p_logits[0], after), params)
    assert_distributed(np.bincount(first, minlength=n_vocab), expected_first)
    # Every first token is even, so the second position's distribution is one: odd ids.
    after.accept(int(np.flatnonzero(expected_first)[0]))
    expected_second = probabilities(masked(p_logits[1], after), params)
    assert_distributed(np.bincount(second, minlength=n_vocab), expected_second)


class Below:
    """A constraint allowing the ids below a bound, whatever came before."""

    def __init__(self, bound: int) -> None:
        self.bound = bound

    def allows(self, tokens):
        return np.asarray(tokens) < self.bound

    def accept(self, token):
        assert token < self.bound

    def fork(self):
        return self


def test_constrained_search_looks_past_the_rows_best_when_they_are_all_refused():
    """The best tokens a constraint allows, found beyond the first widths checked where the
    row's best are all refused: greedy, sampled, and none at all an error."""
    row = np.arange(5000, dtype=np.float32)  # the highest ids are the best
    greedy = SamplingParams(temperature=0)
    assert pick(row, greedy, np.random.default_rng(), Below(100))[0] == 99
    assert verify_greedy(np.stack([row, row]), [99], Below(100)) == (1, 99, [False, False])
    q = sampling.distribution_of(sampling.allowed_best(row, 40, Below(100)), FILTERED)
    assert set(q.ids) <= set(range(60, 100)) and q.ids.max() == 99
    with pytest.raises(SpecrunError, match="allows no token"):
        sampling.allowed_best(row, 2, Below(0))


@pytest.mark.parametrize(
    "bad",
    [
        dict(temperature=np.inf),
        dict(temperature=np.nan),
        dict(top_p=np.nan),
        dict(min_p=np.nan),
        dict(repeat_penalty=np.inf),
        dict(repeat_penalty=np.nan),
        dict(presence_penalty=np.nan),
        dict(frequency_penalty=-np.inf),
        dict(logit_bias=((3, np.nan),)),
        dict(logit_bias=((3, 1e308),)),
        dict(logit_bias=((0, 1.0), (3, -np.inf))),
    ],
)
def test_sampling_values_must_be_finite_and_say_which(bad):
    """One check for the command line and the server alike: --temp inf is refused."""
    with pytest.raises(SpecrunError, match=next(iter(bad))):
        SamplingParams(**bad)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_a_row_with_no_finite_logit_fails_rather_than_draw_an_id(compiled, monkeypatch):
    """NaN or infinity at the top of a row leaves no distribution: a clear error for that
    generation, never an id drawn from nothing (which llama.cpp aborts on)."""
    if not compiled:
        monkeypatch.setattr(sampling, "_compiled", None)
    params = SamplingParams(temperature=1.0, top_k=4)
    finite = np.linspace(0, 1, 10, dtype=np.float32)
    for bad in (np.inf, np.nan):
        row = finite.copy()
        row[:] = bad if np.isnan(bad) else row
        row[3] = bad
        with pytest.raises(sampling.NotFinite):
            distribution(row, params)
        with pytest.raises(sampling.NotFinite):  # the first row the rule reads
            verify(np.stack([row, finite]), [9], [None], params, np.random.default_rng(0))
    # A NaN below the best ranks last: the row samples among its finite logits.
    row = finite.copy()
    row[0] = np.nan
    assert set(distribution(row, params).ids) <= set(range(1, 10))


def seeded_rounds(p_logits, q_logits, params, n_drafts, rounds=DRAWS, position=30):
    """Seeded rounds, seed s each: the draft draws n_drafts from q with the seed's
    noise, as a draft model does, and `verify_seeded` commits. Returns the first committed
    tokens, plain decoding's draws at that position, and the drafts accepted."""
    target_rows = np.tile(p_logits, (n_drafts + 1, 1))
    p, q = distribution(p_logits, params), distribution(q_logits, params)
    firsts, plain, accepted_in_all = [], [], 0
    for seed in range(rounds):
        noise = PositionNoise(seed)
        drafts = [noise.choose(q, position + i) for i in range(n_drafts)]
        accepted, token = verify_seeded(target_rows, drafts, params, noise, position)
        firsts.append(drafts[0] if accepted > 0 else token)
        plain.append(noise.choose(p, position))
        accepted_in_all += accepted
    return np.array(firsts), np.array(plain), accepted_in_all


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "top-k/top-p/min-p"])
def test_seeded_speculation_is_plain_decodings_draw_and_distributed_as_the_target(params):
    """Keyed to (seed, position, token), a seeded round commits exactly what plain decoding
    draws with that seed, whatever the draft proposed; over seeds, as the target."""
    rng = np.random.default_rng(7)
    p_logits = rng.normal(0, 1.5, 20).astype(np.float32)
    q_logits = p_logits + rng.normal(0, 1.0, 20).astype(np.float32)
    firsts, plain, accepted = seeded_rounds(p_logits, q_logits, params, 1)
    np.testing.assert_array_equal(firsts, plain)
    assert_distributed(np.bincount(firsts, minlength=20), probabilities(p_logits, params))
    assert accepted > DRAWS / 3  # the draft's draws agree with the target's often
    _, _, all_accepted = seeded_rounds(p_logits, p_logits, params, 3, rounds=500)
    assert all_accepted == 3 * 500  # a draft equal to the target: every draft accepted


def test_seeded_noise_depends_on_seed_and_position_alone():
    q = Distribution(np.array([3, 8, 9]), np.array([0.2, 0.5, 0.3]))
    wide = Distribution(np.arange(3, 40), np.full(37, 1 / 37))
    picks = [PositionNoise(seed).choose(q, 12) for seed in (5, 5, 6)]
    assert picks[0] == picks[1] and set(picks) <= {3, 8, 9}
    assert PositionNoise(5).choose(wide, 12) == PositionNoise(5).choose(wide, 12)
    assert len({PositionNoise(5).choose(wide, n) for n in range(40)}) > 10  # positions differ
    assert PositionNoise(2**80).choose(q, 0) in (3, 8, 9)  # any seed >= 0
