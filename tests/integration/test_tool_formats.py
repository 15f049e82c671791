"""Tool-call syntaxes through the real chat templates (tiny GGUFs that carry them): the tools
and an earlier call rendered into the prompt, in the syntax the answer is read in; a forced
call's grammar compiled by llama.cpp for each, answered and read back (its special tokens
read as their text); and a forced GLM call sampled with a draft, distributed as plain decoding's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specrun.core.sampling import SamplingParams, probabilities
from specrun.engine import Engine
from specrun.llama.grammar import Grammar
from specrun.llama.model import Model
from specrun.options import DraftOptions, LoadOptions
from specrun.prompt import Message, render
from specrun.tools import Tool, ToolCall, call_grammar, parse_calls, tool_format
from specrun.tools.formats import FORMATS
from tests.support.distribution import assert_distributed, first_marginals
from tests.support.identity import GREEDY, committed
from tests.support.tinymodels import write_template_model

TIME = Tool(
    "get_time",
    "The time in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
DAYS = Tool(
    "forecast",
    "The weather for some days",
    {"type": "object", "properties": {"days": {"type": "integer"}}, "required": ["days"]},
)
TOOLS = (TIME, DAYS)
CALL = ToolCall("get_time", json.dumps({"city": "Paris"}), "call_1")
CONVERSATION = [
    Message("user", "the time in paris"),
    Message("assistant", "", tool_calls=(CALL,)),
    Message("tool", "noon", tool_call_id="call_1"),
]
ASK = [Message("user", "the time in paris")]
NAMES = ["qwen3", "qwen3-coder", "glm-4.5", "gpt-oss", "deepseek-r1", "deepseek-v3.1", "kimi-k2"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("formats")
    return {name: write_template_model(folder / f"{name}.gguf", name) for name in NAMES}


def shown(model: Model, tokens: list[int]) -> str:
    """The tokens' text, special tokens as their text."""
    return b"".join(
        model.token_text(t).encode() if model.is_special(t) else model.piece(t) for t in tokens
    ).decode(errors="replace")


def read(text: str, fmt: str) -> list[tuple[str, object]]:
    """The calls in `text`, from where they start; keys and string values trimmed of the
    space the tiny models' tokenizer (SentencePiece's) puts before a text after markup."""
    _, calls = parse_calls(text[FORMATS[fmt].start(text) :], fmt, TOOLS)
    trim = lambda v: v.strip() if isinstance(v, str) else v  # noqa: E731
    return [
        (c.name, {k.strip(): trim(v) for k, v in json.loads(c.arguments).items()}) for c in calls
    ]


@pytest.mark.parametrize("name", NAMES)
def test_the_earlier_call_is_rendered_in_the_syntax_answers_are_read_in(models, name):
    """The template writes the earlier call; read from where it starts, it is that call. Where
    the template does not describe tools (DeepSeek's), a system message does, asking for the
    template's own syntax."""
    with Model(models[name], n_ctx=4096) as model:
        rendered = shown(model, render(model, CONVERSATION, TOOLS))
        fmt = tool_format(model.chat_template)
    assert "The weather for some days" in rendered  # the tools are described
    turn = rendered[rendered.index("the time in paris") :]  # past the template's own examples
    assert read(turn, fmt)[:1] == [("get_time", {"city": "Paris"})]
    if name.startswith("deepseek"):  # (the example's `▁`s read back as spaces here)
        assert "<function-name>" in rendered
        assert rendered.index("<tools>") < rendered.index("the time in paris")


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("qwen3", "qwen3-coder")])
def test_a_forced_call_compiles_and_answers_in_the_syntax(models, name):
    """A call of `forecast`, whose one argument is a number: a random model ends it (a string
    it could write on and on), its markup spelled a byte a token at worst. (Qwen3-Coder's
    prompt, its tools in long XML, is longer than the tiny models' context.)"""
    with Model(models[name], n_ctx=2048) as model:
        fmt = tool_format(model.chat_template)
        Grammar(model, call_grammar(TOOLS, "required", fmt, several=True)).close()  # it parses
        gbnf = call_grammar((DAYS,), "required", fmt)
        with Engine.load(models[name], options=LoadOptions(n_ctx=2048, threads=1)) as engine:
            events = engine.stream(
                render(engine.target, ASK, (DAYS,)), max_tokens=300, params=GREEDY, grammar=gbnf
            )
            text = shown(engine.target, committed(events))
    calls = read(text, fmt)
    assert len(calls) == 1 and calls[0][0] == "forecast", text
    assert isinstance(calls[0][1]["days"], int)


SAMPLED = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
DRAWS = 1200


def test_a_sampled_forced_glm_call_with_a_draft_follows_plain_decoding(models, tmp_path):
    """The first three tokens of many forced GLM calls sampled with a draft model (the target
    with noise), each seeded, against the marginals of plain decoding under the same grammar,
    by a χ² test per position."""
    draft = write_template_model(tmp_path / "glm-draft.gguf", "glm-4.5", noise=0.1)
    target = models["glm-4.5"]
    gbnf = call_grammar(TOOLS, "required", "glm", several=True)
    options = LoadOptions(n_ctx=1024, threads=1)
    with Engine.load(target, draft, options=options, drafting=DraftOptions(gamma="3")) as engine:
        prompt = render(engine.target, ASK, TOOLS)
        counts = np.zeros((3, engine.target.n_vocab))
        accepted = 0
        for draw in range(DRAWS):
            events = list(
                engine.stream(
                    prompt,
                    max_tokens=3,
                    params=SAMPLED,
                    grammar=gbnf,
                    rng=np.random.default_rng(draw),
                )
            )
            for position, token in enumerate(committed(events)):
                counts[position, token] += 1
            accepted += sum(getattr(e, "accepted", 0) for e in events)
        assert accepted > 0  # the draft's tokens were taken: speculation happened
    with Model(target, n_ctx=1024) as alone:
        vocabulary = np.arange(alone.n_vocab)

        def after(history: list[int]) -> np.ndarray:
            grammar = Grammar(alone, gbnf)
            for token in history[len(prompt) :]:
                grammar.accept(token)
            logits = alone.logits(history, 1)[0].copy()
            logits[~grammar.allows(vocabulary)] = -np.inf
            grammar.close()
            return probabilities(logits, SAMPLED)

        for position, expected in enumerate(first_marginals(after, prompt, 3)):
            assert_distributed(counts[position], expected)
