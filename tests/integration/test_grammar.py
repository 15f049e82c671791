"""Constrained output under exact speculation, on the real demo pair: a JSON schema's
grammar (llama.cpp's GBNF sampler, specrun's sampling), the same greedy answer at every γ
with a draft model and with prompt lookup, valid JSON sampled, and clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specrun import JSON_GRAMMAR, schema_grammar
from specrun.core.loop import Round
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.errors import SpecrunError
from specrun.llama.grammar import Grammar
from specrun.options import PROMPT_LOOKUP, DraftOptions, LoadOptions

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "indoor": {"type": "boolean"},
    },
    "required": ["name", "age", "indoor"],
    "additionalProperties": False,
}
ASK = "Describe a cat as JSON, with its name, its age and whether it lives indoors."
GREEDY = SamplingParams(temperature=0)


def answer(
    engine: Engine, params: SamplingParams, grammar: str = "", ask: str = ASK
) -> tuple[str, list[Round]]:
    rounds = [
        e
        for e in engine.stream(
            ask, max_tokens=96, params=params, grammar=grammar or schema_grammar(SCHEMA)
        )
        if isinstance(e, Round)
    ]
    return "".join(r.text for r in rounds), rounds


def valid(text: str) -> dict:
    record = json.loads(text)
    assert set(record) == {"name", "age", "indoor"}
    assert isinstance(record["name"], str) and len(record["name"]) <= 24
    assert isinstance(record["age"], int) and isinstance(record["indoor"], bool)
    return record


@pytest.fixture(scope="module")
def engines(demo_pair):
    target, draft = demo_pair
    load = LoadOptions(threads=2, n_ctx=1024)
    opened = {
        gamma: Engine.load(target, draft, options=load, drafting=DraftOptions(gamma=gamma))
        for gamma in ("0", "3", "auto")
    }
    opened["lookup"] = Engine.load(
        target, PROMPT_LOOKUP, options=load, drafting=DraftOptions(gamma="4")
    )
    yield opened
    for engine in opened.values():
        engine.close()


def test_greedy_constrained_output_is_the_same_at_every_gamma(engines):
    plain, _ = answer(engines["0"], GREEDY)
    valid(plain)
    for name in ("3", "auto", "lookup"):
        text, rounds = answer(engines[name], GREEDY)
        assert text == plain, name
        if name == "3":
            assert sum(r.accepted for r in rounds) > 0  # the draft was used, and kept to it


def test_sampled_constrained_output_keeps_to_the_schema(engines):
    for seed in range(3):
        params = SamplingParams(temperature=0.8, seed=seed)
        text, rounds = answer(engines["3"], params)
        assert rounds[-1].finish_reason == "stop", text
        valid(text)


def test_any_json_and_a_grammar_of_its_own(engines):
    text, _ = answer(
        engines["3"],
        GREEDY,
        JSON_GRAMMAR,
        "Give a JSON object with the keys a and b set to 1 and 2.",
    )
    assert isinstance(json.loads(text), dict)
    yes_no = 'root ::= ("yes" | "no") "."'
    text, rounds = answer(engines["3"], SamplingParams(temperature=1.0, seed=2), yes_no)
    assert text in ("yes.", "no.") and rounds[-1].finish_reason == "stop"


def test_a_grammar_that_does_not_parse_and_a_token_it_refuses(engines):
    target = engines["0"].target
    with pytest.raises(SpecrunError, match="the grammar does not parse"):
        Grammar(target, "root ::= (")
    grammar = Grammar(target, 'root ::= "yes"')
    refused = target.tokenize("no", add_special=False)[0]
    assert not grammar.allows(np.array([refused]))[0]
    with pytest.raises(SpecrunError, match="does not allow"):  # not llama.cpp's abort
        grammar.accept(refused)
    fork = grammar.fork()
    first = target.tokenize("yes", add_special=False)[0]
    fork.accept(first)
    assert grammar.allows(np.array([first]))[0]  # the original did not move
