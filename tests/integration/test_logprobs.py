"""Log-probabilities of the committed tokens: the target's log-softmax at each position,
the same whether a token was drafted or not, with the most likely tokens beside it."""

from __future__ import annotations

import numpy as np
import pytest

from specrun.core.drafting import ModelDraft
from specrun.core.gamma import FixedGamma
from specrun.core.loop import Round, generate
from specrun.core.sampling import SamplingParams
from specrun.errors import OptionError
from specrun.llama.model import Model

PROMPT = "the cat and the dog in the big red road"


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    with Model(tiny_target, n_ctx=512) as target, Model(tiny_draft, n_ctx=512) as draft:
        yield target, draft


def rounds_of(target, draft, gamma, params, top=3):
    target.reset()
    draft.reset()
    return [
        e
        for e in generate(
            target,
            target.tokenize(PROMPT),
            draft=ModelDraft(draft, target.n_vocab),
            params=params,
            policy=FixedGamma(gamma),
            max_tokens=32,
            logprobs=top,
        )
        if isinstance(e, Round)
    ]


def log_softmax(row: np.ndarray) -> np.ndarray:
    shifted = row.astype(np.float64) - row.max()
    return shifted - np.log(np.exp(shifted).sum())


@pytest.mark.parametrize(
    "params", [SamplingParams(temperature=0), SamplingParams(seed=3)], ids=["greedy", "sampled"]
)
def test_each_committed_token_has_the_targets_logprob_drafted_or_not(pair, params):
    target, draft = pair
    plain = rounds_of(target, draft, 0, params)
    drafted = rounds_of(target, draft, 4, params)
    assert sum(r.accepted for r in drafted) > 0
    entries = [e for r in drafted for e in r.logprobs]
    tokens = [t for r in drafted for t in r.tokens]
    assert [e.token for e in entries] == tokens  # one per committed token
    prompt = target.tokenize(PROMPT)
    for i, entry in enumerate(entries):  # against the target's own row, computed alone
        expected = log_softmax(target.logits(prompt + tokens[:i], 1)[0])
        assert entry.logprob == pytest.approx(expected[entry.token], abs=2e-3)
        assert len(entry.top) == 3 and [lp for _, lp in entry.top] == sorted(
            [lp for _, lp in entry.top], reverse=True
        )
        assert entry.top[0][1] == pytest.approx(expected.max(), abs=2e-3)
    if params.greedy:  # the same tokens at γ 0: the same figures, drafted or not
        assert [e.token for r in plain for e in r.logprobs] == tokens
        np.testing.assert_allclose(
            [e.logprob for r in plain for e in r.logprobs],
            [e.logprob for e in entries],
            atol=2e-3,
        )
        assert all(e.top[0][0] == e.token for e in entries)  # greedy: the most likely


def test_logprobs_out_of_range_is_a_clear_error(pair):
    target, draft = pair
    with pytest.raises(OptionError, match="between 0 and 20"):
        rounds_of(target, draft, 0, SamplingParams(temperature=0), top=21)
