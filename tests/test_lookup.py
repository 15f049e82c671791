"""Prompt lookup and the hybrid draft: proposals, and exactness through the same loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from identity import GREEDY, assert_greedy_identical, greedy_tokens
from specrun.drafting import HybridDraft, ModelDraft
from specrun.lookup import LookupDraft
from specrun.gamma import AdaptiveGamma, FixedGamma
from specrun.prompt import prompt_tokens
from specrun.runtime import Detokenizer, Model
from specrun.sampling import SamplingParams
from specrun.speculative import Round, generate


def naive_lookup(ctx: list[int], n: int, ngram_max: int, ngram_min: int) -> list[int]:
    """The definition: the most recent earlier match of the longest suffix n-gram."""
    for size in range(min(ngram_max, len(ctx)), ngram_min - 1, -1):
        suffix = ctx[-size:]
        for start in range(len(ctx) - size - 1, -1, -1):
            if ctx[start : start + size] == suffix:
                return ctx[start + size : start + size + n]
    return []


@settings(derandomize=True)  # the same examples on every run, so CI is reproducible
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=25), min_size=1, max_size=5))
def test_incremental_index_matches_the_definition(chunks):
    """Growing the sequence chunk by chunk (as rounds do), and restarting on an edited prefix."""
    lookup = LookupDraft(ngram_max=3, ngram_min=1, max_tokens=5)
    two = LookupDraft(ngram_max=3, ngram_min=2, max_tokens=5)
    ctx: list[int] = []
    for i, chunk in enumerate(chunks):
        ctx = ctx + chunk if i % 3 else chunk + ctx[len(chunk):]  # every third chunk edits the prefix
        proposal = lookup.propose(ctx, 4, GREEDY, np.random.default_rng(0))
        assert proposal.tokens == naive_lookup(ctx, 4, 3, 1)
        assert proposal.probs == [None] * len(proposal.tokens)
        assert two.propose(ctx, 4, GREEDY, np.random.default_rng(0)).tokens == naive_lookup(ctx, 4, 3, 2)


def test_lookup_proposes_the_continuation_of_a_repeat():
    lookup = LookupDraft(ngram_max=2, max_tokens=3)
    assert lookup.propose([5, 6, 7, 8, 9, 5, 6], 8, GREEDY, np.random.default_rng(0)).tokens == [7, 8, 9]
    assert lookup.propose([1, 2, 3], 4, GREEDY, np.random.default_rng(0)).tokens == []
    assert lookup.propose([5, 6, 7, 1, 6], 4, GREEDY, np.random.default_rng(0)).tokens == []  # one token is no match


@pytest.fixture(scope="module")
def target(tiny_target):
    with Model(tiny_target, n_ctx=512) as model:
        yield model


def test_lookup_keeps_greedy_identity_and_accepts_copies(target):
    # The tiny model's greedy output soon repeats itself, which lookup exploits.
    prompt = target.tokenize("the cat and the dog and the cat and the dog")
    plain, _ = greedy_tokens(target, prompt, max_tokens=80)
    for policy in (FixedGamma(4), AdaptiveGamma(8)):
        tokens, rounds = greedy_tokens(target, prompt, LookupDraft(), policy, 80)
        assert assert_greedy_identical(target, prompt, plain, tokens, epsilon=1e-3) == "identical"
        assert sum(r.accepted for r in rounds) > 10
        assert len(rounds) < len(plain)  # fewer target passes than tokens


def test_hybrid_keeps_greedy_identity(target, tiny_draft):
    prompt = target.tokenize("the sea is blue and the sun is big")
    plain, _ = greedy_tokens(target, prompt, max_tokens=60)
    with Model(tiny_draft, n_ctx=512) as draft:
        hybrid = HybridDraft(LookupDraft(), ModelDraft(draft, target.n_vocab))
        tokens, rounds = greedy_tokens(target, prompt, hybrid, FixedGamma(3), 60)
    assert tokens == plain
    assert sum(r.drafted for r in rounds) > 0


def test_lookup_under_sampling_stays_valid_and_reproducible(target):
    prompt = target.tokenize("the cat and the dog and the cat and the dog")
    params = SamplingParams(temperature=0.7, seed=5)

    def run():
        return [t for e in generate(target, prompt, draft=LookupDraft(), params=params, policy=FixedGamma(4),
                                    max_tokens=40) if isinstance(e, Round) for t in e.tokens]

    first = run()
    assert first == run() and len(first) == 40


def test_real_model_copies_an_extraction_with_lookup(demo_pair):
    target_path, _ = demo_pair
    with Model(target_path, n_ctx=1024) as target:
        prompt = prompt_tokens(target, 'Copy this JSON and change the age to 31:\n{"name": "Alice", "age": 30, '
                                       '"city": "Paris", "email": "alice@example.com"}')
        plain, _ = greedy_tokens(target, prompt, max_tokens=48)
        tokens, rounds = greedy_tokens(target, prompt, LookupDraft(), AdaptiveGamma(8), 48)
        assert_greedy_identical(target, prompt, plain, tokens, epsilon=0.05)
        detokenizer = Detokenizer(target)
        assert "alice@example.com" in "".join(detokenizer.add(t) for t in tokens)
        assert sum(r.accepted for r in rounds) >= 10  # the answer copies the prompt
        assert len(rounds) < len(tokens) / 2  # in fewer than half as many target passes
