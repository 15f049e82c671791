"""The loop-ceiling bench's NullModel drives the real round loop: its smallest
configuration, checked for what it commits and for how much each round compares."""

from __future__ import annotations

import pytest

import specrun.llama.model as runtime
from bench import loop_ceiling  # the repository root is on sys.path: pyproject's pytest options
from specrun.core.drafting import ModelDraft
from specrun.core.gamma import FixedGamma
from specrun.core.loop import Round, generate

N_VOCAB, CONTEXT, TOKENS = 49_152, 512, 40


def tokens_of(gamma: int, params, table, on_device: bool = False) -> list[int]:
    n_ctx = CONTEXT + TOKENS + 16
    target = loop_ceiling.NullModel(table, n_ctx, on_device=on_device)
    draft = (
        ModelDraft(loop_ceiling.NullModel(table, n_ctx, on_device=on_device), N_VOCAB)
        if gamma
        else None
    )
    prompt = list(range(100, 100 + CONTEXT))
    rounds = [
        e
        for e in generate(
            target, prompt, draft=draft, params=params, policy=FixedGamma(gamma), max_tokens=TOKENS
        )
        if isinstance(e, Round)
    ]
    if gamma:
        assert sum(r.accepted for r in rounds) > 0
    return [t for r in rounds for t in r.tokens]


@pytest.mark.parametrize("rows", loop_ceiling.ROWS)
@pytest.mark.parametrize("sampling", list(loop_ceiling.SAMPLINGS))
def test_the_smallest_ceiling_run_commits_exactly_max_tokens(sampling, rows):
    table = loop_ceiling.logit_table(N_VOCAB)
    params = loop_ceiling.SAMPLINGS[sampling]
    for gamma in loop_ceiling.GAMMAS:
        on_device = rows == "device"
        measured = loop_ceiling.run(table, CONTEXT, gamma, params, TOKENS, on_device)  # asserts it
        assert measured.target_rows == measured.draft_rows + 1  # every draft accepted
        steps = loop_ceiling.breakdown(table, params, measured, on_device)
        assert (steps.scan == 0) == on_device  # the device searched the rows, not the loop
        assert (steps.chain == 0) == params.greedy


def test_the_device_candidates_give_the_tokens_whole_rows_give():
    """The bench's emulated backend sampling commits what whole rows commit, greedy and
    sampled from one seed: what it measures is the same work, done elsewhere."""
    table = loop_ceiling.logit_table(N_VOCAB)
    for params in loop_ceiling.SAMPLINGS.values():
        for gamma in (0, 8):
            assert tokens_of(gamma, params, table, on_device=True) == tokens_of(
                gamma, params, table
            )


def test_greedy_speculation_over_null_models_equals_plain_decoding(monkeypatch):
    table = loop_ceiling.logit_table(N_VOCAB)
    greedy = loop_ceiling.SAMPLINGS["greedy"]
    plain = tokens_of(0, greedy, table)
    compared: list[int] = []
    measure = runtime.common_prefix_length
    monkeypatch.setattr(
        runtime, "common_prefix_length", lambda a, b: compared.append(len(a)) or measure(a, b)
    )
    assert tokens_of(8, greedy, table) == plain
    # The prefill (on fresh models) compares nothing, and no call after it compares more
    # than what followed the committed text, the first round's included: the last drafts and bonus.
    assert compared and max(compared) <= 9


@pytest.mark.parametrize("sampling", list(loop_ceiling.SAMPLINGS))
def test_a_ceiling_run_over_trees_goes_through_the_tree_verify(sampling):
    """The bench's trees (the table's continuation and three decoys) go through the tree
    verify and the cache's branches, committing exactly the tokens asked for; greedy, the
    continuation's branch is accepted whole (5 of a full round's 8 nodes)."""
    table = loop_ceiling.logit_table(N_VOCAB)
    params = loop_ceiling.SAMPLINGS[sampling]
    measured = loop_ceiling.run(table, CONTEXT, 8, params, TOKENS, leaves=4)  # asserts the count
    assert 6 < measured.draft_rows <= 8  # the last rounds have room for fewer
    assert measured.target_rows > (4 if params.greedy else 1)
