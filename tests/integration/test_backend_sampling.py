"""Backend sampling: the target's and the draft's devices choose each row's candidates
(llama.cpp's top-k sampler), and only they reach the loop. On this CPU build the backend
runs it too, so the path is checked here against whole rows: the same candidates, and the
same tokens from the same seed, greedy and sampled, at any γ."""

from __future__ import annotations

import numpy as np
import pytest

from specrun.core.drafting import ModelDraft
from specrun.core.gamma import FixedGamma
from specrun.core.lookup import LookupDraft
from specrun.core.loop import Round, generate
from specrun.core.sampling import CandidateRows, SamplingParams
from specrun.llama.model import Model

PROMPT = "the cat and the dog in the big red road and the cat"
SAMPLED = SamplingParams(temperature=0.9, top_k=20, top_p=0.95, min_p=0.02, seed=5)
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def pairs(tiny_target, tiny_draft):
    """The tiny pair twice: whole rows, and candidates chosen by the backend."""
    loaded = {
        mode: (Model(tiny_target, n_ctx=512, backend_sampling=mode), Model(tiny_draft, n_ctx=512))
        for mode in ("off", "on")
    }
    yield loaded
    for target, draft in loaded.values():
        target.close()
        draft.close()


def tokens_of(target, draft, params, gamma, max_tokens=40, lookup=False):
    target.reset()
    draft.reset()
    source = LookupDraft(3, 1, 6) if lookup else ModelDraft(draft, target.n_vocab)
    rounds = [
        e
        for e in generate(
            target,
            target.tokenize(PROMPT),
            draft=source,
            params=params,
            policy=FixedGamma(gamma),
            max_tokens=max_tokens,
        )
        if isinstance(e, Round)
    ]
    return [t for r in rounds for t in r.tokens], sum(r.accepted for r in rounds)


def test_candidates_are_each_rows_best(pairs):
    (whole, _), (sampled, _) = pairs["off"], pairs["on"]
    assert not whole.samples_on_device and sampled.samples_on_device
    seq = whole.tokenize(PROMPT)
    rows = whole.logits(seq, 5).copy()
    candidates = sampled.logits(seq, 5, top=12)
    assert isinstance(candidates, CandidateRows)
    assert candidates.ids.shape == candidates.logits.shape == (5, 12)
    for row, ids, values in zip(rows, candidates.ids, candidates.logits):
        np.testing.assert_array_equal(values, row[ids])  # the same logits, bit for bit
        assert set(ids) == set(np.argsort(-row, kind="stable")[:12])
    # Whole rows again when asked without `top`, and candidates of another width after.
    np.testing.assert_array_equal(sampled.logits(seq, 2), rows[-2:])
    assert sampled.logits(seq, 1, top=3).ids.shape == (1, 3)
    # A width as large as the vocabulary needs the whole row.
    assert isinstance(sampled.logits(seq, 1, top=sampled.n_vocab), np.ndarray)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("gamma", [0, 1, 4])
def test_the_same_tokens_as_whole_rows(pairs, params, gamma):
    """From the same seed, the backend's candidates give the tokens whole rows give: p and
    q are the same distributions, drawn with the same uniforms."""
    whole = tokens_of(*pairs["off"], params, gamma)
    sampled = tokens_of(*pairs["on"], params, gamma)
    assert sampled == whole
    if gamma:
        assert whole[1] > 0  # drafts were accepted


def test_lookup_drafts_verify_on_candidates(pairs):
    for params in (GREEDY, SAMPLED):
        assert tokens_of(*pairs["on"], params, 4, lookup=True) == tokens_of(
            *pairs["off"], params, 4, lookup=True
        )


def test_auto_and_off_keep_whole_rows_on_the_cpu(tiny_target):
    """auto keeps whole rows on a CPU-only build: there the backend's top-k costs more than
    specrun's own search over the row (bench/results/loop-ceiling.txt)."""
    for mode in ("auto", "off"):
        with Model(tiny_target, n_ctx=256, backend_sampling=mode) as model:
            assert not model.samples_on_device
            seq = model.tokenize(PROMPT)
            assert isinstance(model.logits(seq, 1, top=5), np.ndarray)
