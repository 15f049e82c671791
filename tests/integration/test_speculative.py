"""The round loop on tiny generated models: greedy identity, stopping, streaming."""

from __future__ import annotations

import pytest

from specrun.core.drafting import ModelDraft
from specrun.core.gamma import AdaptiveGamma, FixedGamma, HeuristicGamma
from specrun.core.loop import Prefill, Round, generate
from specrun.core.sampling import SamplingParams
from specrun.errors import SpecrunError
from specrun.llama.model import Model
from tests.support.identity import GREEDY, assert_greedy_identical, greedy_tokens
from tests.support.tinymodels import write_tiny_model

PROMPT = "the cat and the dog in the big red road"


@pytest.fixture(scope="module")
def target(tiny_target):
    with Model(tiny_target, n_ctx=512) as model:
        yield model


@pytest.fixture(scope="module")
def draft_model(tiny_draft):
    with Model(tiny_draft, n_ctx=512) as model:
        yield model


@pytest.mark.parametrize(
    "policy",
    [FixedGamma(1), FixedGamma(3), FixedGamma(8), HeuristicGamma(6), AdaptiveGamma(6)],
    ids=lambda p: p.name,
)
def test_greedy_speculative_equals_target_alone(target, draft_model, policy):
    prompt = target.tokenize(PROMPT)
    plain, _ = greedy_tokens(target, prompt, max_tokens=64)
    speculative, rounds = greedy_tokens(
        target, prompt, ModelDraft(draft_model, target.n_vocab), policy, 64
    )
    assert assert_greedy_identical(target, prompt, plain, speculative, epsilon=1e-3) == "identical"
    if policy.name != "auto":
        assert sum(r.accepted for r in rounds) > 0  # the draft really was used
    assert all(1 <= len(r.tokens) <= r.drafted + 1 for r in rounds)


def test_padded_draft_vocabulary_keeps_identity(target, tiny_draft_padded):
    prompt = target.tokenize(PROMPT)
    plain, _ = greedy_tokens(target, prompt)
    with Model(tiny_draft_padded, n_ctx=512) as padded:
        speculative, rounds = greedy_tokens(
            target, prompt, ModelDraft(padded, target.n_vocab), FixedGamma(4)
        )
    assert speculative == plain
    assert sum(r.accepted for r in rounds) > 0


def test_gamma_zero_is_plain_decoding(target, draft_model):
    prompt = target.tokenize(PROMPT)
    plain, _ = greedy_tokens(target, prompt, max_tokens=20)
    tokens, rounds = greedy_tokens(
        target, prompt, ModelDraft(draft_model, target.n_vocab), FixedGamma(0), 20
    )
    assert tokens == plain
    assert all(r.drafted == 0 and len(r.tokens) == 1 for r in rounds)


def test_a_draft_that_is_not_asked_is_not_prefilled_and_catches_up_when_it_is(target, draft_model):
    """auto starts with plain rounds: the draft skips the prompt, and the first round that
    drafts takes in everything since, timed as catching up, not as drafting."""
    prompt = target.tokenize(PROMPT)
    plain, _ = greedy_tokens(target, prompt, max_tokens=12)
    draft_model.reset()
    warm_up = [0, 0, 0, 1, 1, 1]
    events = generate(
        target,
        prompt,
        draft=ModelDraft(draft_model, target.n_vocab),
        params=GREEDY,
        policy=FixedSchedule(warm_up),
        max_tokens=12,
    )
    tokens, rounds, draft_cache = [], [], []
    for event in events:
        if isinstance(event, Round):
            tokens += event.tokens
            rounds.append(event)
        draft_cache.append(len(draft_model.tokens))
    assert tokens == plain
    # The first round's token came from the prompt's pass; the policy chose from the second on.
    assert [r.prompt_pass for r in rounds[:2]] == [True, False] and rounds[0].gamma == 0
    assert [r.gamma for r in rounds[1:7]] == warm_up
    assert (
        draft_cache[:5] == [0] * 5
    )  # the prefill, the prompt's pass and the plain rounds left the draft alone
    # The first drafting round took in the prompt and the 4 tokens so far, then drafted one.
    assert draft_cache[5] == len(prompt) + 4
    assert rounds[4].catch_up_seconds > 0 and all(r.catch_up_seconds == 0 for r in rounds[:4])
    assert all(r.catch_up_seconds == 0 for r in rounds[5:7])  # drafting every round: never behind


def test_the_first_token_comes_from_the_prompts_pass(tiny_target, monkeypatch):
    """As llama-completion does: n tokens cost the prompt's pass and n - 1 decodes, not one
    decode more for the prompt's last token; the policy chooses and learns from the second
    round on, the first decoding one."""
    with Model(tiny_target, n_ctx=512) as target:
        prompt = target.tokenize(PROMPT)
        plain, _ = greedy_tokens(target, prompt, max_tokens=8)
        target.reset()
        decodes: list[int] = []  # the cache's length before each decode
        decode = target.batch._decode
        monkeypatch.setattr(
            target.batch, "_decode", lambda: decodes.append(len(target.tokens)) or decode()
        )
        policy = FixedSchedule([0] * 8)
        events = list(generate(target, prompt, params=GREEDY, policy=policy, max_tokens=8))
    prefill, rounds = events[0], events[1:]
    assert [t for r in rounds for t in r.tokens] == plain
    assert prefill.evaluated == len(prompt) and decodes[0] == 0
    assert decodes[1:] == [len(prompt) + i for i in range(7)]  # one a round, from the second
    assert [r.prompt_pass for r in rounds] == [True] + [False] * 7
    assert policy.gammas == [0]  # seven rounds observed


class FixedSchedule:
    """γ from a list, then plain decoding."""

    name = "schedule"

    def __init__(self, gammas: list[int]) -> None:
        self.gammas = list(gammas)

    def next_gamma(self) -> int:
        return self.gammas[0] if self.gammas else 0

    def observe(self, event: Round) -> None:
        self.gammas = self.gammas[1:]


def test_end_of_generation_inside_an_accepted_draft_stops_there(target, tiny_dir):
    prompt = target.tokenize(PROMPT)
    plain, _ = greedy_tokens(target, prompt, max_tokens=16)
    # Make a token the target emits mid-answer the EOS of a copy of the same weights.
    stop_at = next(i for i in range(4, 16) if plain[i] not in plain[:i])
    eos = plain[stop_at]
    path = write_tiny_model(tiny_dir / f"eos-{eos}.gguf", eos_id=eos)
    with Model(path, n_ctx=512) as eos_target, Model(path, n_ctx=512) as same_weights_draft:
        tokens, rounds = greedy_tokens(
            eos_target,
            prompt,
            ModelDraft(same_weights_draft, eos_target.n_vocab),
            FixedGamma(8),
            max_tokens=40,
        )
    assert tokens == plain[:stop_at]
    assert rounds[-1].finish_reason == "stop" and rounds[-1].ended_at_eog
    assert not any(r.ended_at_eog for r in rounds[:-1])
    # The EOS was proposed by the draft and accepted, with more drafts after it discarded.
    assert rounds[-1].accepted > len(rounds[-1].tokens)


def test_token_limit_is_exact(target, draft_model):
    prompt = target.tokenize(PROMPT)
    for limit in (1, 5, 13):
        tokens, rounds = greedy_tokens(
            target, prompt, ModelDraft(draft_model, target.n_vocab), FixedGamma(8), limit
        )
        assert len(tokens) == limit
        assert rounds[-1].finish_reason == "length"


def test_stop_string_ends_the_text_and_is_not_shown(target, draft_model):
    prompt = target.tokenize(PROMPT)
    events = list(generate(target, prompt, params=GREEDY, max_tokens=40))
    full = "".join(e.text for e in events if isinstance(e, Round))
    stop = full[3:6]
    assert len(stop) == 3 and full.find(stop) >= 1  # some text comes before it
    for draft in (None, ModelDraft(draft_model, target.n_vocab)):
        rounds = [
            e
            for e in generate(
                target,
                prompt,
                draft=draft,
                params=GREEDY,
                policy=FixedGamma(4),
                max_tokens=40,
                stop=[stop],
            )
            if isinstance(e, Round)
        ]
        assert "".join(r.text for r in rounds) == full[: full.find(stop)]
        assert rounds[-1].finish_reason == "stop"


def test_segments_mark_draft_tokens_and_stream_the_same_text(target, draft_model):
    prompt = target.tokenize(PROMPT)
    rounds = [
        e
        for e in generate(
            target,
            prompt,
            draft=ModelDraft(draft_model, target.n_vocab),
            params=GREEDY,
            policy=FixedGamma(4),
            max_tokens=40,
        )
        if isinstance(e, Round)
    ]
    plain = [
        e for e in generate(target, prompt, params=GREEDY, max_tokens=40) if isinstance(e, Round)
    ]
    assert "".join(r.text for r in rounds) == "".join(r.text for r in plain)
    assert any(drafted for r in rounds for _, drafted in r.segments)
    assert all(
        r.from_draft == tuple([True] * r.accepted + [False])[: len(r.tokens)] for r in rounds
    )


def test_prefill_reports_the_prompt_and_cancel_stops_between_rounds(target, draft_model):
    prompt = target.tokenize(PROMPT)
    rounds_seen = []
    events = generate(
        target,
        prompt,
        draft=ModelDraft(draft_model, target.n_vocab),
        params=GREEDY,
        policy=FixedGamma(2),
        max_tokens=100,
        cancelled=lambda: len(rounds_seen) >= 3,
    )
    first = next(events)
    assert isinstance(first, Prefill) and first.prompt_tokens == len(prompt)
    for event in events:
        rounds_seen.append(event)
    assert len(rounds_seen) == 4 and rounds_seen[-1].finish_reason == "cancelled"


def test_seeded_sampling_is_reproducible_and_speculation_keeps_it_valid(target, draft_model):
    prompt = target.tokenize(PROMPT)
    params = SamplingParams(temperature=0.8, seed=123)

    def run():
        return [
            t
            for e in generate(
                target,
                prompt,
                draft=ModelDraft(draft_model, target.n_vocab),
                params=params,
                policy=FixedGamma(3),
                max_tokens=30,
            )
            if isinstance(e, Round)
            for t in e.tokens
        ]

    assert run() == run()


def test_prompt_longer_than_context_is_a_clear_error(target):
    with pytest.raises(SpecrunError, match="must be shorter than the context"):
        next(generate(target, [1] + [5] * target.n_ctx))
