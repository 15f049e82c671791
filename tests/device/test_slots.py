"""Slots with their models on the device: three generations whose rounds decode in one batch
per model on the Vulkan device, two greedy and one sampled, each greedy answer its request's
own as plain decoding alone gives it, and a second turn that takes its prefix from the cache;
and two slots drafting with EAGLE-3 heads over hidden rows read back from the device."""

from __future__ import annotations

from specrun.core.loop import Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.llama.model import Model
from specrun.options import DraftOptions, Eagle3Head, LoadOptions
from tests.support.identity import GREEDY, assert_greedy_identical, committed, greedy_tokens
from tests.support.threads import in_threads
from tests.support.tinymodels import write_tiny_eagle3_head

PROMPTS = ("the cat and the dog in the big red road", "the sun is big and the sea", "the moon")


def test_slots_on_the_device_answer_as_alone(tiny_target, tiny_draft):
    options = LoadOptions(n_ctx=256, parallel=3, threads=1, gpu_layers=99, draft_gpu_layers=99)
    sampled = SamplingParams(temperature=0.8, top_k=8, seed=11)
    with Engine.load(
        tiny_target, tiny_draft, options=options, drafting=DraftOptions(gamma="3")
    ) as engine:
        assert engine.placement().gpu_layers == ("2/2", "2/2") and len(engine.slots) == 3
        tokens = [engine.target.tokenize(p) for p in PROMPTS]
        answers = in_threads(
            [
                lambda t=t, p=p: committed(engine.stream(t, max_tokens=30, params=p))
                for t, p in zip(tokens, [GREEDY, sampled, GREEDY])
            ]
        )
        # The next turn of the first conversation finds its slot's cache.
        turn = tokens[0] + answers[0]
        events = list(engine.stream(turn, max_tokens=8, params=GREEDY))
        prefill = next(e for e in events if isinstance(e, Prefill))
        assert prefill.evaluated < len(turn) // 2, prefill
    with Model(tiny_target, n_ctx=256, gpu_layers=99) as alone:
        for prompt, answer in zip(tokens[::2], answers[::2]):
            plain, _ = greedy_tokens(alone, prompt, max_tokens=30)
            assert assert_greedy_identical(alone, prompt, plain, answer, 1e-3) == "identical"
    assert 0 < len(answers[1]) <= 30


def test_slots_drafting_with_heads_on_the_device_answer_as_alone(tiny_target, tiny_dir):
    """Two slots whose EAGLE-3 heads read their own sequences' hidden rows, taken back from
    the device after each batch: each greedy answer is plain decoding's of its request."""
    head = Eagle3Head(write_tiny_eagle3_head(tiny_dir / "head-device-slots.gguf"))
    options = LoadOptions(n_ctx=256, parallel=2, threads=1, gpu_layers=99)
    with Engine.load(
        tiny_target, head, options=options, params=GREEDY, drafting=DraftOptions(gamma="3")
    ) as engine:
        tokens = [engine.target.tokenize(p) for p in PROMPTS[:2]]
        results = in_threads([lambda t=t: list(engine.stream(t, max_tokens=24)) for t in tokens])
    with Model(tiny_target, n_ctx=256, gpu_layers=99) as alone:
        for prompt, events in zip(tokens, results):
            plain, _ = greedy_tokens(alone, prompt, max_tokens=24)
            answer = committed(events)
            assert assert_greedy_identical(alone, prompt, plain, answer, 1e-3) == "identical"
            assert sum(e.drafted for e in events if isinstance(e, Round)) > 0
