"""Slots with what decodes one sequence specially: `reproducible` (each sequence's passes
shaped as alone, bit for bit) and heads (each sequence's hidden rows kept apart, each slot a
head of its own). First at the model, then through the engine: each slot's greedy output is
its request's own, whatever the other slots do at the same time."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from specrun.core.loop import Round
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.llama.heads import NativeHead
from specrun.llama.model import Call, Model
from specrun.options import MTP_LAYERS, DraftOptions, Eagle3Head, LoadOptions
from tests.support.identity import GREEDY, assert_greedy_identical, committed, greedy_tokens
from tests.support.slots import assert_slots_distributed
from tests.support.threads import in_threads
from tests.support.tinymodels import write_tiny_eagle3_head, write_tiny_mtp_model

PROMPTS = (
    "the cat and the dog in the big red road",
    "the sun is big and the sea",
    "a tree and a road and a cat and",
)
EAGLE3_LAYERS = (0, 1, 1)  # those the tiny EAGLE-3 head reads (the tiny target has 2)


def test_reproducible_sequences_decode_bit_for_bit_as_alone(tiny_target):
    """Two sequences' calls served together, then again after a rollback: each call's rows are
    those a reproducible model of one sequence gives for its history, bit for bit."""
    with (
        Model(tiny_target, n_ctx=256, threads=1, reproducible=True, sequences=2) as shared,
        Model(tiny_target, n_ctx=256, threads=1, reproducible=True) as alone,
    ):
        assert shared.invariance == alone.invariance
        a, b = (shared.tokenize(prompt) for prompt in PROMPTS[:2])
        histories = [
            [(a, 3), (b, 1)],
            [(a + [300, 301], 2), (b + [302], 1)],
            [(a + [303], 1), (b + [302, 304, 305], 3)],  # a rolled back, b three on
        ]
        for step, calls in enumerate(histories):
            served = [Call(shared.caches[i], seq, last) for i, (seq, last) in enumerate(calls)]
            shared.decode_calls(served[::-1] if step % 2 else served)
            for i, call in enumerate(served):
                alone.reset()
                for seq, last in (history[i] for history in histories[: step + 1]):
                    rows = alone.logits(seq, last)
                assert np.array_equal(call.rows, rows), (step, i, shared.invariance)


@pytest.mark.parametrize("layers", [EAGLE3_LAYERS, ()], ids=["layer-inputs", "last-state"])
def test_each_sequence_keeps_its_own_hidden_rows(tiny_target, layers):
    """Hidden rows of two sequences decoded in one batch: each sequence's are those of the
    sequence decoded alone."""
    with (
        Model(tiny_target, n_ctx=256, threads=1, sequences=2) as shared,
        Model(tiny_target, n_ctx=256, threads=1) as alone,
    ):
        kept = shared.keep_hidden(layers)
        [own] = alone.keep_hidden(layers)
        assert len(kept) == 2 and kept[0] is not kept[1]
        seqs = [shared.tokenize(prompt) for prompt in PROMPTS[:2]]
        shared.decode_calls([Call(shared.caches[i], seq, 1) for i, seq in enumerate(seqs)])
        steps = [seq + [300, 301, 302] for seq in seqs]
        shared.decode_calls([Call(shared.caches[i], seq, 4) for i, seq in enumerate(steps)])
        for rows, seq in zip(kept, steps):
            alone.reset()
            alone.logits(seq, 4)
            assert (rows.start, rows.end) == (0, len(seq))
            np.testing.assert_allclose(rows.rows(0, len(seq)), own.rows(0, len(seq)), atol=1e-4)


@pytest.fixture(scope="module")
def heads(tiny_dir: Path, tiny_target: Path) -> dict[str, tuple[Path, object]]:
    return {
        "eagle3": (tiny_target, Eagle3Head(write_tiny_eagle3_head(tiny_dir / "slots-h.gguf"))),
        "mtp": (write_tiny_mtp_model(tiny_dir / "slots-mtp.gguf"), MTP_LAYERS),
    }


def answer(engine: Engine, prompt: list[int], max_tokens: int) -> tuple[list[int], list[Round]]:
    rounds = [e for e in engine.stream(prompt, max_tokens=max_tokens) if isinstance(e, Round)]
    return committed(rounds), rounds


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_slots_drafting_with_heads_answer_greedy_as_alone(heads, kind):
    """Three slots, each with a head of its own, generating at once, twice (the second turn
    finds what the first left in its slot): each answer is plain decoding's of its request."""
    target, draft = heads[kind]
    with Engine.load(
        target,
        draft,
        options=LoadOptions(n_ctx=256, parallel=3, threads=1),
        params=GREEDY,
        drafting=DraftOptions(gamma="3"),
    ) as engine:
        assert len({id(slot.draft) for slot in engine.slots}) == 3
        prompts = [engine.prompt(prompt) for prompt in PROMPTS]
        for _ in range(2):
            results = in_threads([lambda p=p: answer(engine, p, 24) for p in prompts])
            with Model(target, n_ctx=256, threads=1) as alone:
                for prompt, (tokens, rounds) in zip(prompts, results):
                    plain, _ = greedy_tokens(alone, prompt, max_tokens=24)
                    assert assert_greedy_identical(alone, prompt, plain, tokens, 1e-3) == (
                        "identical"
                    )
                    assert sum(r.drafted for r in rounds) > 0  # the slot's head drafted
        # Each slot's head drafted over its own sequence's rows: its rounds are those of the
        # head alone (a head reading another slot's rows would propose other tokens).
        with Engine.load(
            target,
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


def test_slots_heads_run_in_the_gathers_thread(heads, monkeypatch):
    """A slot's head passes run where the models' decodes do, in the gather's one thread: a
    pass from each slot's own thread would give llama.cpp's OpenMP a team per thread."""
    target, draft = heads["mtp"]
    threads: set[str] = set()
    feed = NativeHead.feed

    def recorded(head: NativeHead, *args: object, **kwargs: object) -> object:
        threads.add(threading.current_thread().name)
        return feed(head, *args, **kwargs)

    monkeypatch.setattr(NativeHead, "feed", recorded)
    with Engine.load(
        target,
        draft,
        options=LoadOptions(n_ctx=256, parallel=2, threads=1),
        params=GREEDY,
        drafting=DraftOptions(gamma="3"),
    ) as engine:
        prompts = [engine.prompt(prompt) for prompt in PROMPTS[:2]]
        in_threads([lambda p=p: answer(engine, p, 16) for p in prompts])
    assert threads == {"specrun-batch"}


SAMPLED = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
DRAWS = 1200  # generations per slot


def test_slots_sampling_with_heads_are_distributed_as_plain_decoding(heads):
    """Two slots with an EAGLE-3 head each, sampling at once: the first three tokens of each
    slot's answers (the second and third through a round the head drafted for) follow plain
    decoding of its request alone, by a chi-square test per position."""
    target, draft = heads["eagle3"]
    with Engine.load(
        target,
        draft,
        options=LoadOptions(n_ctx=256, parallel=2, threads=1),
        drafting=DraftOptions(gamma="2"),
    ) as engine:
        prompts = [engine.target.tokenize(p) for p in PROMPTS[:2]]
        assert_slots_distributed(engine, target, prompts, SAMPLED, DRAWS)


def test_reproducible_slots_answer_byte_for_byte_as_plain_decoding(tiny_target, tiny_draft):
    """Reproducible with three slots drafting at once: each answer, bytes and all, is what a
    reproducible engine of one slot gives without a draft, whichever requests run beside it."""
    reproducible = LoadOptions(n_ctx=256, threads=1, reproducible=True)
    with Engine.load(tiny_target, options=reproducible, params=GREEDY) as plain:
        prompts = [plain.prompt(prompt) for prompt in PROMPTS]
        expected = [answer(plain, prompt, 32)[0] for prompt in prompts]
    with Engine.load(
        tiny_target,
        tiny_draft,
        options=LoadOptions(n_ctx=256, threads=1, reproducible=True, parallel=3),
        params=GREEDY,
        drafting=DraftOptions(gamma="4"),
    ) as engine:
        for order in (prompts, prompts[::-1]):
            results = in_threads([lambda p=p: answer(engine, p, 32)[0] for p in order])
            assert results == [expected[prompts.index(p)] for p in order]
