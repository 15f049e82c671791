"""The prompt cache (specrun.llama.prompt_cache): a conversation that comes back after another
took its slot restores its saved state and evaluates only what is new, and answers greedy as
plain decoding of its prompt does, with a draft model, a head and prompt lookup, in one
sequence and in slots."""

from __future__ import annotations

import pytest

from specrun.core.loop import Prefill
from specrun.engine import Engine
from specrun.llama.model import Model
from specrun.llama.prompt_cache import PromptCache
from specrun.options import PROMPT_LOOKUP, DraftOptions, Eagle3Head, LoadOptions
from tests.support.identity import GREEDY, assert_greedy_identical, committed, greedy_tokens
from tests.support.tinymodels import write_tiny_eagle3_head

FIRST = "the cat and the dog in the big red road and the sun is big and the sea is blue"
OTHER = "hello world, code and edit a line of code in the night"
THIRD = "a tree and a road and a moon"
MAX_TOKENS = 24


def _answer(engine: Engine, prompt: list[int]) -> tuple[Prefill, list[int]]:
    events = list(engine.stream(prompt, max_tokens=MAX_TOKENS, params=GREEDY))
    prefill = events[0]
    assert isinstance(prefill, Prefill)
    return prefill, committed(events)


def _returning_conversation(engine: Engine, target_path: object, others: list[str]) -> None:
    """A conversation, others in its slot (or slots), then its next turn: restored, and its
    answer is plain decoding's."""
    cache = engine.prompt_cache
    assert cache is not None
    first = engine.target.tokenize(FIRST)
    _, answer = _answer(engine, first)
    for text in others:
        _answer(engine, engine.target.tokenize(text))
    assert cache.saved >= 1
    returning = [*first, *answer, *engine.target.tokenize(" and the moon")]
    prefill, again = _answer(engine, returning)
    assert cache.restored == 1
    # Only what follows the saved prompt is decoded (the restored tokens are not).
    assert prefill.evaluated <= len(returning) - len(first)
    with Model(target_path, n_ctx=256) as alone:
        plain, _ = greedy_tokens(alone, returning, max_tokens=MAX_TOKENS)
        assert assert_greedy_identical(alone, returning, plain, again, 1e-3) == "identical"


@pytest.mark.parametrize("draft", ["model", "lookup", "head"])
def test_a_returning_conversation_restores_its_prompt(tiny_target, tiny_draft, tiny_dir, draft):
    """A head has no hidden rows for the restored positions: it starts over after them."""
    head = Eagle3Head(write_tiny_eagle3_head(tiny_dir / "prompt-cache-head.gguf"))
    source = {"model": tiny_draft, "lookup": PROMPT_LOOKUP, "head": head}[draft]
    with Engine.load(
        tiny_target,
        source,
        options=LoadOptions(n_ctx=256, threads=1),
        drafting=DraftOptions(gamma="2"),
        prompt_cache=PromptCache(64 << 20),
    ) as engine:
        _returning_conversation(engine, tiny_target, [OTHER])
        if draft == "model":  # the draft model's sequence came back with the target's
            assert engine.draft_model is not None
            assert len(engine.draft_model.tokens) > len(engine.target.tokenize(FIRST))


@pytest.mark.parametrize("reproducible", [False, True])
def test_slots_restore_a_prompt_another_slot_saved(tiny_target, tiny_draft, reproducible):
    """Two slots: the first conversation's slot is taken by the third request (the second took
    the other), and the first comes back to a slot that holds neither. Reproducible: each slot's
    cells in a stream of their own, its decodes padded."""
    with Engine.load(
        tiny_target,
        tiny_draft,
        options=LoadOptions(n_ctx=256, parallel=2, threads=1, reproducible=reproducible),
        drafting=DraftOptions(gamma="2"),
        prompt_cache=PromptCache(64 << 20),
    ) as engine:
        _returning_conversation(engine, tiny_target, [OTHER, THIRD])


def test_the_cache_keeps_to_its_bytes_and_drops_the_least_recently_used(tiny_target):
    with Engine.load(
        tiny_target, options=LoadOptions(n_ctx=256, threads=1), prompt_cache=PromptCache(0)
    ) as engine:
        cache = engine.prompt_cache
        assert cache is not None
        first = engine.target.tokenize(FIRST)
        _answer(engine, first)
        one = len(engine.target.sequence_state(engine.target.caches[0]))
        assert cache.saved == 0  # nothing fits in 0 bytes
        cache.limit_bytes = one * 3 // 2  # the first conversation, and half as much again
        _answer(engine, engine.target.tokenize(OTHER))  # saves the first
        assert len(cache) == 1 and cache.nbytes == one
        _answer(engine, engine.target.tokenize(THIRD))  # saves the second: the first goes
        assert len(cache) == 1 and cache.nbytes <= cache.limit_bytes
        prefill, _ = _answer(engine, first)
        assert cache.restored == 0 and prefill.evaluated == len(first) - 1  # but its BOS
