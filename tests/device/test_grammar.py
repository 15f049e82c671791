"""Constrained output under speculation with the models on the device: a JSON schema's grammar
and llama.cpp's JSON grammar, drafted by a draft model and by prompt lookup, give the greedy
answer of plain decoding, which is the CPU build's."""

from __future__ import annotations

import pytest

from specrun import JSON_GRAMMAR, schema_grammar
from specrun.core.loop import Round
from specrun.engine import Engine
from specrun.options import PROMPT_LOOKUP, DraftOptions, LoadOptions
from tests.support.identity import GREEDY

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
PROMPT = "the cat and the dog in the big red road"
TOKENS = 48
ON_DEVICE = LoadOptions(n_ctx=256, gpu_layers=99, draft_gpu_layers=99, fit=False)


@pytest.mark.parametrize("grammar", [schema_grammar(SCHEMA), JSON_GRAMMAR], ids=["schema", "json"])
def test_constrained_greedy_output_is_the_same_at_every_gamma_and_the_cpus(
    grammar, tiny_target, tiny_draft, cpu_reference
):
    (cpu,) = cpu_reference(
        {"target": str(tiny_target), "prompts": [PROMPT], "tokens": TOKENS, "grammar": grammar}
    )["greedy"]
    answers = {}
    for name, draft, gamma in [
        ("plain", None, "0"),
        ("draft γ=3", tiny_draft, "3"),
        ("lookup", PROMPT_LOOKUP, "auto"),
    ]:
        with Engine.load(
            tiny_target, draft, options=ON_DEVICE, drafting=DraftOptions(gamma=gamma)
        ) as engine:
            assert engine.placement().device == "Vulkan"
            prompt = engine.target.tokenize(PROMPT)
            rounds = [
                e
                for e in engine.stream(prompt, max_tokens=TOKENS, params=GREEDY, grammar=grammar)
                if isinstance(e, Round)
            ]
            answers[name] = [t for r in rounds for t in r.tokens]
            if name == "draft γ=3":
                assert sum(r.drafted for r in rounds) > 0
    assert answers["plain"] == cpu
    assert answers["draft γ=3"] == answers["lookup"] == cpu
