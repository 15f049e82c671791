"""Block drafts (DFlash, DSpark) in the slots of a parallel engine: each slot drafts with a
block of its own over its own sequence's hidden rows, its passes run in the gather's thread,
and each slot's greedy answer is plain decoding's of its request, whatever the other slot does
at the same time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from specrun.core.loop import Round
from specrun.engine import Engine
from specrun.llama.blocks import NativeBlock
from specrun.llama.model import Model
from specrun.llama.slots import BlockView
from specrun.options import BlockDraftFile, DraftOptions, LoadOptions
from tests.support.identity import GREEDY, assert_greedy_identical, committed, greedy_tokens
from tests.support.threads import in_threads
from tests.support.tinymodels import write_tiny_block_draft

PROMPTS = ("the cat and the dog in the big red road", "a tree and a road and a cat and")
SLOTS = LoadOptions(n_ctx=256, parallel=2, threads=1)


@pytest.fixture(scope="module")
def blocks(tiny_dir: Path) -> dict[str, BlockDraftFile]:
    return {
        "dflash": BlockDraftFile(write_tiny_block_draft(tiny_dir / "slots-dflash.gguf")),
        "dspark": BlockDraftFile(
            write_tiny_block_draft(tiny_dir / "slots-dspark.gguf", dspark=True)
        ),
    }


def answer(engine: Engine, prompt: list[int], max_tokens: int) -> tuple[list[int], list[Round]]:
    rounds = [e for e in engine.stream(prompt, max_tokens=max_tokens) if isinstance(e, Round)]
    return committed(rounds), rounds


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_slots_drafting_with_block_drafts_answer_greedy_as_alone(tiny_target, blocks, kind):
    """Two slots, each with a block draft of its own, generating at once, twice (the second
    turn finds what the first left in its slot): each answer is plain decoding's, and each
    slot's rounds are those of its block draft alone (one reading the other slot's rows would
    propose other tokens)."""
    draft = blocks[kind]
    with Engine.load(
        tiny_target, draft, options=SLOTS, params=GREEDY, drafting=DraftOptions(gamma="3")
    ) as engine:
        assert engine.slots is not None
        views = [slot.draft.block for slot in engine.slots]  # type: ignore[union-attr]
        assert all(isinstance(view, BlockView) for view in views)
        assert len({id(view.block) for view in views}) == 2  # a context each
        assert engine.draft is not None and engine.draft.name == f"{kind}:{draft.path.name}"
        prompts = [engine.prompt(prompt) for prompt in PROMPTS]
        for _ in range(2):
            results = in_threads([lambda p=p: answer(engine, p, 24) for p in prompts])
            with Model(tiny_target, n_ctx=256, threads=1) as alone:
                for prompt, (tokens, rounds) in zip(prompts, results):
                    plain, _ = greedy_tokens(alone, prompt, max_tokens=24)
                    assert assert_greedy_identical(alone, prompt, plain, tokens, 1e-3) == (
                        "identical"
                    )
                    assert sum(r.drafted for r in rounds) > 0  # the slot's block drafted
        with Engine.load(
            tiny_target,
            draft,
            options=LoadOptions(n_ctx=256, threads=1),
            params=GREEDY,
            drafting=DraftOptions(gamma="3"),
        ) as single:
            for prompt, (_, rounds) in zip(prompts, results):
                _, alone_rounds = answer(single, prompt, 24)
                assert [(r.drafted, r.accepted) for r in rounds] == [
                    (r.drafted, r.accepted) for r in alone_rounds
                ]


def test_slots_block_passes_run_in_the_gathers_thread(tiny_target, blocks, monkeypatch):
    """A slot's block passes (its target rows taken in, its block drafted) run where the
    models' decodes do, in the gather's one thread, as a head's do."""
    threads: set[str] = set()
    inject, draft = NativeBlock.inject, NativeBlock.draft

    def recorded(method):  # noqa: ANN001, ANN202 - a method of NativeBlock, wrapped
        def call(block: NativeBlock, *args: object) -> object:
            threads.add(threading.current_thread().name)
            return method(block, *args)

        return call

    monkeypatch.setattr(NativeBlock, "inject", recorded(inject))
    monkeypatch.setattr(NativeBlock, "draft", recorded(draft))
    with Engine.load(
        tiny_target,
        blocks["dspark"],
        options=SLOTS,
        params=GREEDY,
        drafting=DraftOptions(gamma="3"),
    ) as engine:
        prompts = [engine.prompt(prompt) for prompt in PROMPTS]
        results = in_threads([lambda p=p: answer(engine, p, 16) for p in prompts])
    assert all(sum(r.drafted for r in rounds) > 0 for _, rounds in results)
    assert threads == {"specrun-batch"}
