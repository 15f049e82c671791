"""Prompt lookup and the hybrid draft: proposals, and exactness through the same loop."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specrun.core.drafting import HybridDraft, ModelDraft
from specrun.core.gamma import AdaptiveGamma, FixedGamma
from specrun.core.lookup import CANDIDATES, MATCH_CAP, LookupDraft
from specrun.core.loop import Round, generate
from specrun.core.sampling import SamplingParams
from specrun.core.sequence import Tokens
from specrun.core.text import Detokenizer
from specrun.llama.model import Model
from specrun.prompt import prompt_tokens
from tests.support.identity import GREEDY, assert_greedy_identical, greedy_tokens


def naive_lookup(ctx: list[int], n: int, ngram_max: int, ngram_min: int) -> list[int]:
    """The definition: the longest suffix key with earlier occurrences; its last CANDIDATES
    occurrences vote on the next token (a winner short of twice the rest proposes nothing);
    of the winner's occurrences, the longest match (up to MATCH_CAP), then the most recent;
    a copy that reaches the end goes on from its own start (period len(ctx) - best)."""
    for size in range(min(ngram_max, len(ctx)), ngram_min - 1, -1):
        suffix = ctx[-size:]
        starts = [s + size for s in range(len(ctx) - size) if ctx[s : s + size] == suffix][
            -CANDIDATES:
        ]
        if starts:
            first, count = Counter(ctx[s] for s in starts).most_common(1)[0]
            if count < 2 * (len(starts) - count):
                return []

            def match(s: int) -> int:
                length = 0
                while length < min(s, MATCH_CAP) and ctx[s - 1 - length] == ctx[-1 - length]:
                    length += 1
                return length

            best = max((s for s in starts if ctx[s] == first), key=lambda s: (match(s), s))
            return [ctx[best + i % (len(ctx) - best)] for i in range(n)]
    return []


def propose(lookup: LookupDraft, ctx: list[int], n: int = 8) -> list[int]:
    proposal = lookup.propose(ctx, n, GREEDY, np.random.default_rng(0))
    assert proposal.probs == [None] * len(proposal.tokens)  # point masses
    return proposal.tokens


@settings(derandomize=True)  # the same examples on every run, so CI is reproducible
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=25), min_size=1, max_size=5))
def test_incremental_index_matches_the_definition(chunks):
    """Growing the sequence chunk by chunk (as rounds do), and restarting on an edited prefix.
    A fresh lookup follows the definition; one that saw the earlier rounds may only cut its
    draft shorter (its track record), never to nothing."""
    lookups = {
        1: LookupDraft(ngram_max=3, ngram_min=1, max_tokens=5),
        2: LookupDraft(ngram_max=3, ngram_min=2, max_tokens=5),
    }
    ctx: list[int] = []
    for i, chunk in enumerate(chunks):
        ctx = (
            ctx + chunk if i % 3 else chunk + ctx[len(chunk) :]
        )  # every third chunk edits the prefix
        for ngram_min, lookup in lookups.items():
            expected = naive_lookup(ctx, 4, 3, ngram_min)
            assert propose(LookupDraft(3, ngram_min, 5), ctx, 4) == expected
            tokens = propose(lookup, ctx, 4)
            assert tokens == expected[: len(tokens)] and bool(tokens) == bool(expected)


def test_lookup_proposes_the_continuation_of_a_repeat():
    lookup = LookupDraft(ngram_max=2, max_tokens=3)
    assert propose(lookup, [5, 6, 7, 8, 9, 5, 6]) == [7, 8, 9]
    assert propose(LookupDraft(), [1, 2, 3]) == []
    assert propose(LookupDraft(), [5, 6, 7, 1, 6]) == []  # one token is no match


def test_a_copy_that_reaches_the_end_repeats_its_period():
    # [1, 2] last continued at index 6, three tokens before the end: "3, 1, 2" again and again.
    assert propose(LookupDraft(ngram_max=2), [9, 1, 2, 3, 1, 2, 3, 1, 2], 8) == [
        3,
        1,
        2,
        3,
        1,
        2,
        3,
        1,
    ]


def test_the_most_frequent_continuation_wins_and_a_split_vote_proposes_nothing():
    # [1, 2] was followed by 3 twice and by 4 once (the most recent): 3 wins.
    assert propose(LookupDraft(ngram_max=2), [1, 2, 3, 0, 1, 2, 3, 9, 1, 2, 4, 8, 1, 2])[0] == 3
    # 3 once and 4 once: no clear continuation, no draft.
    assert propose(LookupDraft(ngram_max=2), [1, 2, 3, 0, 1, 2, 4, 8, 1, 2]) == []


def test_a_longer_match_beats_a_more_recent_one():
    # Both occurrences of [1, 2] continue with 3; the first also matches the 7 before it.
    ctx = [7, 1, 2, 3, 5, 5, 0, 1, 2, 3, 6, 6, 7, 1, 2]
    assert propose(LookupDraft(ngram_max=2), ctx, 3) == [3, 5, 5]
    assert propose(LookupDraft(ngram_max=2), ctx[1:], 3) == [
        3,
        6,
        6,
    ]  # equal matches: the most recent


def test_a_draft_cut_short_limits_its_key_next_time():
    lookup = LookupDraft(ngram_max=2)
    ctx = [1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2]
    assert propose(lookup, ctx) == [3, 4, 5, 6, 7, 8, 0, 1]
    ctx += [3, 4, 9]  # two accepted, then the target chose otherwise
    ctx += [0, 1, 2]  # the same key again
    assert propose(lookup, ctx) == [3, 4, 9]  # two accepted last time: at most three now
    ctx += [3, 4, 9, 5]  # all three right: the limit is lifted
    ctx += [1, 2]
    assert len(propose(lookup, ctx)) > 3


class CountingTokens(Tokens):
    """The loop's append-only sequence, counting the items read through slices."""

    reads = 0

    def __getitem__(self, i):
        item = super().__getitem__(i)
        if isinstance(i, slice):
            CountingTokens.reads += len(item)
        return item


@pytest.mark.parametrize("prefill", ["whole", "but last"])
def test_a_round_reads_only_the_new_tokens(prefill):
    """The loop prefills a view of its sequence (all but its last token), then passes the
    sequence itself: the view stands for it, and each round checks only the seam."""
    ctx = CountingTokens(np.random.default_rng(0).integers(0, 50, 5000).tolist())
    lookup = LookupDraft()
    lookup.prefill(ctx if prefill == "whole" else ctx.but_last())
    for token in range(20):
        CountingTokens.reads = 0
        lookup.propose(ctx, 8, GREEDY, np.random.default_rng(0))
        assert CountingTokens.reads < 20  # not the 5000 before them
        ctx.extend([token])


def test_a_new_conversation_or_an_edited_one_starts_over():
    lookup = LookupDraft(ngram_max=2)
    assert propose(lookup, [1, 2, 3, 4, 1, 2]) == [3, 4, 1, 2, 3, 4, 1, 2]
    assert propose(lookup, [7, 8, 9, 5, 6, 7, 8]) == [
        9,
        5,
        6,
        7,
        8,
        9,
        5,
        6,
    ]  # unrelated and longer
    edited = [7, 8, 6, 5, 6, 7, 8, 2]  # the same length and last indexed token, the middle edited
    assert propose(lookup, edited) == propose(LookupDraft(ngram_max=2), edited)
    ctx = [1, 2, 3, 4, 1, 2]
    propose(lookup, ctx)
    ctx[-1] = 5  # the loop's own list, changed at the seam
    ctx.append(1)
    assert propose(lookup, ctx) == propose(LookupDraft(ngram_max=2), ctx)


@pytest.fixture(scope="module")
def target(tiny_target):
    with Model(tiny_target, n_ctx=512) as model:
        yield model


def test_lookup_keeps_greedy_identity_and_accepts_copies(target, monkeypatch):
    # The tiny model's greedy output soon repeats itself, which lookup exploits. Its decode
    # (~0.2 ms) is no longer than the Python around it, so auto's choice would follow that
    # noise; 2 ms more a decode makes it cost what a small real model's does.
    decode = target.batch._decode
    monkeypatch.setattr(target.batch, "_decode", lambda: (time.sleep(0.002), decode())[1])
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
        hybrid = HybridDraft(LookupDraft(), [ModelDraft(draft, target.n_vocab)])
        tokens, rounds = greedy_tokens(target, prompt, hybrid, FixedGamma(3), 60)
    assert tokens == plain
    assert sum(r.drafted for r in rounds) > 0


def test_lookup_under_sampling_stays_valid_and_reproducible(target):
    prompt = target.tokenize("the cat and the dog and the cat and the dog")
    params = SamplingParams(temperature=0.7, seed=5)

    def run():
        return [
            t
            for e in generate(
                target,
                prompt,
                draft=LookupDraft(),
                params=params,
                policy=FixedGamma(4),
                max_tokens=40,
            )
            if isinstance(e, Round)
            for t in e.tokens
        ]

    first = run()
    assert first == run() and len(first) == 40


def test_real_model_copies_an_extraction_with_lookup(demo_pair):
    target_path, _ = demo_pair
    with Model(target_path, n_ctx=1024) as target:
        prompt = prompt_tokens(
            target,
            'Copy this JSON and change the age to 31:\n{"name": "Alice", "age": 30, '
            '"city": "Paris", "email": "alice@example.com"}',
        )
        plain, _ = greedy_tokens(target, prompt, max_tokens=48)
        tokens, rounds = greedy_tokens(target, prompt, LookupDraft(), AdaptiveGamma(8), 48)
        assert_greedy_identical(target, prompt, plain, tokens, epsilon=0.05)
        detokenizer = Detokenizer(target)
        assert "alice@example.com" in "".join(detokenizer.add(t) for t in tokens)
        assert sum(r.accepted for r in rounds) >= 10  # the answer copies the prompt
        assert len(rounds) < len(tokens) / 2  # in fewer than half as many target passes


class Refusing:
    """A constraint that refuses one token, whatever came before."""

    def __init__(self, refused: int) -> None:
        self.refused = refused

    def allows(self, tokens):
        return np.asarray(tokens) != self.refused

    def accept(self, token):
        assert token != self.refused

    def fork(self):
        return self


def test_a_lookup_proposal_stops_at_the_first_token_a_constraint_refuses():
    ctx = [1, 2, 3, 4, 5, 9, 1, 2]
    whole = LookupDraft(ngram_max=2, ngram_min=1, max_tokens=5).propose(
        ctx, 5, GREEDY, np.random.default_rng(0)
    )
    assert whole.tokens[:3] == [3, 4, 5]
    cut = LookupDraft(ngram_max=2, ngram_min=1, max_tokens=5).propose(
        ctx, 5, GREEDY, np.random.default_rng(0), Refusing(5)
    )
    assert cut.tokens == [3, 4] and cut.probs == [None, None]
