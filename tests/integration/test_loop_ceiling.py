"""The loop-ceiling bench's NullModel drives the real round loop: its smallest
configuration, checked for what it commits and for how much each round compares."""

from __future__ import annotations

import numpy as np
import pytest

import specrun.llama.model as runtime
from bench import loop_ceiling  # the repository root is on sys.path: pyproject's pytest options
from specrun.core.drafting import ModelDraft
from specrun.core.gamma import FixedGamma
from specrun.core.loop import Round, generate

N_VOCAB, CONTEXT, TOKENS = 49_152, 512, 40


def tokens_of(gamma: int, params, table: np.ndarray) -> list[int]:
    n_ctx = CONTEXT + TOKENS + 16
    target = loop_ceiling.NullModel(table, n_ctx)
    draft = ModelDraft(loop_ceiling.NullModel(table, n_ctx), N_VOCAB) if gamma else None
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


@pytest.mark.parametrize("sampling", list(loop_ceiling.SAMPLINGS))
def test_the_smallest_ceiling_run_commits_exactly_max_tokens(sampling):
    table = loop_ceiling.logit_table(N_VOCAB)
    for gamma in loop_ceiling.GAMMAS:
        loop_ceiling.run(
            N_VOCAB, CONTEXT, gamma, loop_ceiling.SAMPLINGS[sampling], TOKENS, table
        )  # asserts it


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
