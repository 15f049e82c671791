"""Several generations at once on one engine (`parallel`): each in a slot of its own, their
rounds decoded together. Whatever the other slots do, each slot's greedy output is its
request's own, and its sampled output is distributed as plain decoding of its request
alone (a chi-square test per slot, on real decodes of the tiny model)."""

from __future__ import annotations

import numpy as np
import pytest

from specrun.core.loop import Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.errors import OptionError
from specrun.llama.model import Call, Model
from specrun.options import DraftOptions, LoadOptions
from tests.support.identity import GREEDY, assert_greedy_identical, committed, greedy_tokens
from tests.support.slots import assert_slots_distributed
from tests.support.threads import in_threads

PROMPTS = (
    "the cat and the dog in the big red road",
    "the sun is big and the sea",
    "a tree and a road and a cat and",
    "the moon",
)
SAMPLED = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
DRAWS = 1200  # generations per slot


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_draft):
    with Engine.load(
        tiny_target,
        tiny_draft,
        # One thread a decode: libgomp throttles its threads' spinning once another thread (the
        # tests' main one) has a team of its own, and decodes of the tiny model are mostly
        # that wait (DESIGN.md, "Slots").
        options=LoadOptions(n_ctx=256, parallel=4, threads=1),
        drafting=DraftOptions(gamma="2"),
    ) as loaded:
        yield loaded


def test_each_slot_answers_greedy_as_its_request_alone(engine, tiny_target):
    """Eight requests on four slots (the rest wait for a free one), of different lengths, so
    slots finish and take the next request while others run."""
    prompts = [engine.target.tokenize(p) for p in PROMPTS * 2]
    lengths = [40, 12, 33, 25, 7, 48, 19, 30]
    answers = in_threads(
        [
            lambda p=p, n=n: committed(engine.stream(p, max_tokens=n, params=GREEDY))
            for p, n in zip(prompts, lengths)
        ]
    )
    with Model(tiny_target, n_ctx=256) as alone:
        for prompt, n, answer in zip(prompts, lengths, answers):
            plain, _ = greedy_tokens(alone, prompt, max_tokens=n)
            assert assert_greedy_identical(alone, prompt, plain, answer, 1e-3) == "identical"
    assert sorted(slot.index for slot in engine.slots.free) == [0, 1, 2, 3]  # every slot free again


def test_each_slot_is_distributed_as_plain_decoding_of_its_request(engine, tiny_target):
    """The first three tokens of each slot's prompt: the first from the prompt's pass, the
    next two from a round that drafted two (γ 2), decoded in batches with the other slots'."""
    prompts = [engine.target.tokenize(p) for p in PROMPTS]
    assert_slots_distributed(engine, tiny_target, prompts, SAMPLED, DRAWS)


def test_a_slot_takes_the_prefix_another_slot_evaluated(engine):
    """A request that shares a long prefix with one running in another slot evaluates only
    what follows it, and answers as it would alone."""
    shared = engine.target.tokenize(" ".join(PROMPTS))
    first, second = [*shared, 300], [*shared, 301]
    running = engine.stream(first, max_tokens=30, params=GREEDY)
    assert isinstance(next(running), Prefill)  # first's slot holds the prefix now
    events = list(engine.stream(second, max_tokens=10, params=GREEDY))
    running.close()  # its slot is free again
    prefill = events[0]
    assert isinstance(prefill, Prefill) and prefill.evaluated <= 2
    with Engine.load(engine.target.path, options=LoadOptions(n_ctx=256)) as alone:
        expected = committed(alone.stream(second, max_tokens=10, params=GREEDY))
    assert committed(events) == expected


def test_streams_interleaved_in_one_thread_both_finish(engine):
    """A stream whose consumer holds on to it (here: two streams read in turn by one
    thread) does not stall the other for good."""
    prompts = [engine.target.tokenize(p) for p in PROMPTS[:2]]
    streams = [engine.stream(p, max_tokens=12, params=GREEDY) for p in prompts]
    answers: list[list[int]] = [[], []]
    live = [True, True]
    while any(live):
        for i, stream in enumerate(streams):
            if live[i]:
                event = next(stream, None)
                live[i] = event is not None
                answers[i] += event.tokens if isinstance(event, Round) else []
    assert [len(a) for a in answers] == [12, 12]
    alone = in_threads(
        [lambda p=p: committed(engine.stream(p, max_tokens=12, params=GREEDY)) for p in prompts]
    )
    assert answers == alone


def test_slots_whose_device_chooses_the_candidates_answer_as_alone(tiny_target, tiny_draft):
    """Backend sampling (a top-k chain on each sequence, on the CPU backend that runs the same
    chain as a GPU's): each slot's rows reach the loop as its own candidates, two greedy and
    top-k's sampled, side by side in one batch, and each greedy answer is its request's own."""
    options = LoadOptions(n_ctx=256, parallel=3, threads=1, backend_sampling="on")
    drafting = DraftOptions(gamma="3")
    with Engine.load(tiny_target, tiny_draft, options=options, drafting=drafting) as engine:
        assert engine.target.samples_on_device
        tokens = [engine.target.tokenize(p) for p in PROMPTS[:3]]
        sampled = SamplingParams(temperature=0.8, top_k=8)
        answers = in_threads(
            [
                lambda t=t, p=p: committed(engine.stream(t, max_tokens=30, params=p))
                for t, p in zip(tokens, [GREEDY, sampled, GREEDY])
            ]
        )
    with Model(tiny_target, n_ctx=256) as alone:
        for prompt, answer in zip(tokens[::2], answers[::2]):
            plain, _ = greedy_tokens(alone, prompt, max_tokens=30)
            assert assert_greedy_identical(alone, prompt, plain, answer, 1e-3) == "identical"
    assert 0 < len(answers[1]) <= 30


def test_calls_longer_than_a_batch_decode_in_several_each_with_its_rows(tiny_target):
    """Three sequences' prompts, 16 positions a decode: the rows asked for come from the last
    decodes (the second call's 20 from two), each as one sequence alone has them."""
    with (
        Model(tiny_target, n_ctx=256, n_batch=16, sequences=3) as shared,
        Model(tiny_target, n_ctx=256) as alone,
    ):
        seqs = [alone.tokenize(prompt) for prompt in PROMPTS[:3]]
        calls = [
            Call(shared.caches[i], seq, last) for i, (seq, last) in enumerate(zip(seqs, (1, 20, 3)))
        ]
        shared.decode_calls(calls)
        for call, seq in zip(calls, seqs):
            assert call.cache.tokens == seq
            np.testing.assert_allclose(call.rows, alone.logits(seq, call.last), atol=1e-4)


def test_no_slots_is_refused(tiny_target):
    """Reproducible decoding and heads take slots (test_slots_features.py); none is refused."""
    with pytest.raises(OptionError, match="at least 1"):
        Engine.load(tiny_target, options=LoadOptions(parallel=0))
