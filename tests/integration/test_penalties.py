"""Penalties and logit bias under speculation: every draft row and every verified row takes
the penalties of the text before its position, drafts included, so the output is
distributed as plain decoding's with them (a chi-square test over the loop itself, on
models whose rows are fixed tables), and greedy output is the same at every γ."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import chisquare

from bench import loop_ceiling
from specrun.core.drafting import ModelDraft
from specrun.core.gamma import FixedGamma
from specrun.core.loop import Round, generate
from specrun.core.sampling import (
    LOGIT_LIMIT,
    PositionNoise,
    SamplingParams,
    pick,
    probabilities,
)
from specrun.errors import OptionError
from specrun.llama.model import Model
from tests.support.identity import greedy_tokens

N_VOCAB = 12
PROMPT = [1, 2, 3, 1, 4]
PENALTIES = dict(
    repeat_penalty=2.0,
    presence_penalty=1.5,
    frequency_penalty=0.5,
    logit_bias=((5, 1.0), (7, -2.0)),
)
PLAIN = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, **PENALTIES)
FILTERED = SamplingParams(temperature=0.8, top_k=6, top_p=0.9, min_p=0.02, **PENALTIES)
DRAWS = 10_000


def table(seed: int) -> loop_ceiling.LogitTable:
    logits = loop_ceiling.logit_table(N_VOCAB)
    rows = np.random.default_rng(seed).normal(0, 1.2, (loop_ceiling.TABLE_ROWS, N_VOCAB))
    logits.rows = np.concatenate([rows, rows]).astype(np.float32)
    return logits


def chain(target: loop_ceiling.LogitTable, params, history: list[int]) -> np.ndarray:
    """Plain decoding's distribution of the token after `history`: its row, penalized."""
    row = target.rows[(len(history) - 1) % loop_ceiling.TABLE_ROWS].copy()
    params.penalize(row, history)
    return probabilities(row, params)


def first_tokens(target_table, draft_table, params, gamma: int, rng) -> list[int]:
    target = loop_ceiling.NullModel(target_table, 64)
    draft = ModelDraft(loop_ceiling.NullModel(draft_table, 64), N_VOCAB) if gamma else None
    events = generate(
        target, PROMPT, draft=draft, params=params, policy=FixedGamma(gamma), max_tokens=4, rng=rng
    )
    return [t for e in events if isinstance(e, Round) for t in e.tokens]


@pytest.mark.parametrize("params", [PLAIN, FILTERED], ids=["plain", "top-k/top-p/min-p"])
@pytest.mark.parametrize("draws", ["stream", "seeded"])
def test_penalized_speculation_is_distributed_as_penalized_plain_decoding(params, draws):
    """From a stream, the accept/reject rule; with a seed per generation, the rule keyed to
    positions, whose tokens are also plain decoding's with that seed, token for token."""
    target_table, draft_table = table(1), table(2)
    rng = np.random.default_rng(5)
    counts = np.zeros((3, N_VOCAB))
    for seed in range(DRAWS):
        if draws == "stream":
            tokens = first_tokens(target_table, draft_table, params, 2, rng)
        else:
            tokens = first_tokens(target_table, draft_table, params, 2, PositionNoise(seed))
            if seed < 500:
                assert tokens == first_tokens(target_table, None, params, 0, PositionNoise(seed))
        for position in range(3):
            counts[position, tokens[position]] += 1
    # The first three tokens' marginals, exactly, over every history that leads to them.
    first = chain(target_table, params, PROMPT)
    second = sum(first[a] * chain(target_table, params, [*PROMPT, a]) for a in range(N_VOCAB))
    third = sum(
        first[a]
        * chain(target_table, params, [*PROMPT, a])[b]
        * chain(target_table, params, [*PROMPT, a, b])
        for a in range(N_VOCAB)
        for b in range(N_VOCAB)
    )
    for observed, expected in zip(counts, (first, second, third)):
        support = expected > 0
        assert observed[~support].sum() == 0
        result = chisquare(observed[support], expected[support] / expected[support].sum() * DRAWS)
        assert result.pvalue > 1e-3, result


def test_greedy_penalized_output_is_the_same_at_every_gamma(tiny_target, tiny_draft):
    greedy = SamplingParams(temperature=0, **PENALTIES)
    with Model(tiny_target, n_ctx=512) as target, Model(tiny_draft, n_ctx=512) as draft:
        prompt = target.tokenize("the cat and the dog and the cat")
        answers = [
            greedy_tokens(
                target,
                prompt,
                ModelDraft(draft, target.n_vocab),
                FixedGamma(gamma),
                max_tokens=40,
                params=greedy,
            )[0]
            for gamma in (0, 3)
        ]
        unpenalized, _ = greedy_tokens(target, prompt, policy=FixedGamma(0), max_tokens=40)
    assert answers[0] == answers[1]
    assert answers[0] != unpenalized  # the penalties changed the answer


@pytest.mark.parametrize(
    "bad",
    [
        dict(repeat_penalty=0),
        dict(presence_penalty=3),
        dict(frequency_penalty=-2.5),
        dict(penalty_last_n=-1),
        dict(logit_bias=((3, 150.0),)),
        dict(logit_bias=((-1, 1.0),)),
    ],
)
def test_bad_penalties_are_named(bad):
    with pytest.raises(OptionError, match=next(iter(bad))):
        SamplingParams(**bad)


@pytest.mark.parametrize("repeat_penalty", [5e-324, 1e-300, 1e-30, 1e30, 1e300, 1.7e308])
@pytest.mark.parametrize("frequency_penalty", [-2.0, 2.0])
def test_extreme_penalties_leave_finite_rows_and_valid_draws(repeat_penalty, frequency_penalty):
    """A penalty near 0 or past float32's range lifts or sinks a repeated token as far as a
    logit may go (LOGIT_LIMIT), never to infinity: the chain's distribution stays finite, its
    draws stay in the vocabulary, greedy and sampled alike, with no warning."""
    params = SamplingParams(
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        repeat_penalty=repeat_penalty,
        presence_penalty=-2.0,
        frequency_penalty=frequency_penalty,
    )
    row = np.linspace(-5, 5, N_VOCAB, dtype=np.float32)
    row[4] = 0.0  # a logit of 0: 0 times any penalty
    history = [1, 4, 9, 9, 11, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        params.penalize(row, history)
        assert np.isfinite(row).all() and np.abs(row).max() <= LOGIT_LIMIT
        p = probabilities(row, params)
        assert np.isfinite(p).all() and p.sum() == pytest.approx(1)
        assert np.isfinite(row - row.max()).all()  # what top_probability and logprobs take
    draws = {pick(row, params, np.random.default_rng(n))[0] for n in range(50)}
    assert draws <= set(range(N_VOCAB))
    if repeat_penalty < 1:  # the repeated tokens with positive logits lead
        assert draws <= {9, 11}
    if repeat_penalty <= 1e-300:  # lifted as far as a logit may go: a tie at the top
        assert p[9] == p[11] == 0.5


def test_bias_over_the_whole_vocabulary_is_one_vector():
    """Each token's bias, duplicates added (--logit-bias twice), those past the row left out,
    as one add: the row's logits as adding them one by one gives."""
    n = 1000
    bias = tuple((token, float(token % 7) - 3) for token in range(n)) + ((5, 1.5), (n + 3, 9.0))
    params = SamplingParams(logit_bias=bias)
    row = np.random.default_rng(0).normal(size=n).astype(np.float32)
    expected = row.copy()
    for token, value in bias:
        if token < n:
            expected[token] += value
    params.penalize(row, [])
    np.testing.assert_array_equal(row, expected)
