"""Layers on the device: the tiny pair and the demo pair wholly offloaded, the target split
between the device and the CPU, the draft on the device with the target on the CPU and the
other way round. Greedy output is the CPU build's (by the near-tie rule), the prompt's logits
are the CPU build's to float tolerance, and sampled output is distributed as the target's own
(a chi-square test of the first tokens, drafted at γ 2)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from specrun.core.loop import Round
from specrun.core.sampling import SamplingParams, probabilities
from specrun.engine import Engine
from specrun.options import PROMPT_LOOKUP, DraftOptions, LoadOptions
from tests.support.distribution import assert_distributed, first_marginals
from tests.support.identity import GREEDY, assert_greedy_identical, committed

PROMPTS = ["the cat and the dog in the big red road", "hello world, code and edit a line"]
TOKENS = 32
ALL = 99  # every layer and the output layer
# (target's GPU layers, draft's): the tiny models have two layers, so 1 splits the target.
PLACEMENTS = {
    "both on the device": (ALL, ALL),
    "target split": (1, ALL),
    "draft on the device": (0, ALL),
    "target on the device": (ALL, 0),
}
SAMPLED = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
DRAWS = 600
# The same float32 weights on two backends: ggml-vulkan rounds a matmul's activations to F16 where
# the device has it (lavapipe: 0.009 at most over the tiny model's logits, of magnitude up to 25).
LOGITS_ATOL = 2e-2


def load(target, draft, target_layers: int, draft_layers: int, gamma: str = "3") -> Engine:
    return Engine.load(
        target,
        draft,
        options=LoadOptions(
            n_ctx=512, gpu_layers=target_layers, draft_gpu_layers=draft_layers, fit=False
        ),
        drafting=DraftOptions(gamma=gamma),
    )


@pytest.fixture(scope="module")
def reference(cpu_reference, tiny_target):
    return cpu_reference({"target": str(tiny_target), "prompts": PROMPTS, "tokens": TOKENS})


@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_greedy_output_is_the_cpu_builds(placement, tiny_target, tiny_draft, reference):
    target_layers, draft_layers = PLACEMENTS[placement]
    with load(tiny_target, tiny_draft, target_layers, draft_layers) as engine:
        where = engine.placement()
        assert where.gpu_layers == (f"{min(target_layers, 2)}/2", f"{min(draft_layers, 2)}/2")
        assert where.device == "Vulkan"
        for text, plain, logits in zip(PROMPTS, reference["greedy"], reference["logits"]):
            prompt = engine.target.tokenize(text)
            row = engine.target.logits(prompt, 1)[0]
            np.testing.assert_allclose(row, logits, atol=LOGITS_ATOL)
            assert int(np.argmax(row)) == int(np.argmax(logits))
            rounds = [
                e
                for e in engine.stream(prompt, max_tokens=TOKENS, params=GREEDY)
                if isinstance(e, Round)
            ]
            answer = [t for r in rounds for t in r.tokens]
            verdict = assert_greedy_identical(engine.target, prompt, plain, answer, 1e-3)
            assert verdict == "identical", verdict
            assert sum(r.drafted for r in rounds) > 0  # the draft model drafted (γ 3)


def test_prompt_lookup_on_the_device_is_the_cpu_builds(tiny_target, reference):
    with load(tiny_target, PROMPT_LOOKUP, ALL, ALL, gamma="auto") as engine:
        for text, plain in zip(PROMPTS, reference["greedy"]):
            prompt = engine.target.tokenize(text)
            answer = committed(engine.stream(prompt, max_tokens=TOKENS, params=GREEDY))
            verdict = assert_greedy_identical(engine.target, prompt, plain, answer, 1e-3)
            assert verdict == "identical", verdict


@pytest.mark.parametrize("placement", ["both on the device", "target split"])
def test_sampled_output_is_distributed_as_the_target(placement, tiny_target, tiny_draft):
    """The first three tokens: the first from the prompt's pass, the next two from rounds that
    drafted, against the marginals of the device target's own distribution."""
    target_layers, draft_layers = PLACEMENTS[placement]
    with load(tiny_target, tiny_draft, target_layers, draft_layers, gamma="2") as engine:
        prompt = engine.target.tokenize(PROMPTS[0])
        counts = np.zeros((3, engine.target.n_vocab))
        for draw in range(DRAWS):
            rng = np.random.default_rng(draw)
            for position, token in enumerate(
                committed(engine.stream(prompt, max_tokens=3, params=SAMPLED, rng=rng))
            ):
                counts[position, token] += 1
        drafted = sum(
            e.drafted
            for e in engine.stream(prompt, max_tokens=3, params=SAMPLED)
            if isinstance(e, Round)
        )
        assert drafted >= 1  # a round drafted (the first token is the prompt's pass)

        def after(history: list[int]) -> np.ndarray:
            return probabilities(engine.target.logits(history, 1)[0], SAMPLED)

        for position, expected in enumerate(first_marginals(after, prompt, 3)):
            assert_distributed(counts[position], expected)


def test_the_demo_pair_offloaded_answers_as_the_cpu_build(demo_pair, cpu_reference):
    """The real pair (F16 target, Q4_0 draft) wholly on the device, then the target split."""
    target, draft = demo_pair
    text = "The capital of France is"
    tokens = 12
    (plain,) = cpu_reference({"target": str(target), "prompts": [text], "tokens": tokens})["greedy"]
    for target_layers in (ALL, 15):
        with load(target, draft, target_layers, ALL) as engine:
            assert engine.placement().gpu_layers[0] == f"{min(target_layers, 30)}/30"
            prompt = engine.target.tokenize(text)
            answer = committed(engine.stream(prompt, max_tokens=tokens, params=GREEDY))
            verdict = assert_greedy_identical(engine.target, prompt, plain, answer, 1e-2)
            assert verdict == "identical" or verdict.startswith("near tie"), verdict


def test_a_chat_turn_after_drafted_rounds_keeps_the_shared_prefix(demo_pair, cpu_reference):
    """Drafted rounds, then a second prompt whose system prompt stays in the caches and whose
    suffix decodes: the pattern that crashed ggml-vulkan's fused kernels on lavapipe until
    specrun.llama turned them off (GGML_VK_DISABLE_FUSION)."""
    assert os.environ.get("GGML_VK_DISABLE_FUSION") == "1"
    target, draft = demo_pair
    with load(target, draft, ALL, ALL) as engine:
        prompts = [engine.prompt(f"Tell me a story about a cat number {i}") for i in range(2)]
        answers = [
            committed(engine.stream(prompt, max_tokens=8, params=GREEDY)) for prompt in prompts
        ]
        expected = cpu_reference({"target": str(target), "prompts": prompts, "tokens": 8})
        for prompt, plain, answer in zip(prompts, expected["greedy"], answers):
            verdict = assert_greedy_identical(engine.target, prompt, plain, answer, 1e-2)
            assert verdict == "identical" or verdict.startswith("near tie"), verdict
