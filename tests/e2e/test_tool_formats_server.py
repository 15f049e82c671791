"""Forced calls through `specrun serve` in the newer syntaxes (GLM-4.5's tagged arguments,
gpt-oss's Harmony, and DeepSeek-V3.1's and Kimi-K2's marks, which their models hold as control
tokens that render as nothing: the answer keeps their text for the parser), each model a tiny
GGUF with its real template and a draft: OpenAI's client gets the calls as JSON arguments,
whole and streamed alike, one or more as `parallel_tool_calls` says."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import Server
from tests.support.tinymodels import write_template_model

FORECAST = {
    "type": "function",
    "function": {
        "name": "forecast",
        "description": "The weather for some days",
        "parameters": {
            "type": "object",
            "properties": {"days": {"type": "integer"}},
            "required": ["days"],
        },
    },
}
ASK = [{"role": "user", "content": "the weather for the next days"}]
# Greedy and bounded: a number ends a call that a random model would never end in a string.
FIELDS = {"tools": [FORECAST], "temperature": 0, "max_tokens": 300}


@pytest.fixture(scope="module", params=["glm-4.5", "gpt-oss", "deepseek-v3.1", "kimi-k2"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder: Path = tmp_path_factory.mktemp(request.param)
    target = write_template_model(folder / "target.gguf", request.param)
    draft = write_template_model(folder / "draft.gguf", request.param, noise=0.1)
    served = Server("-t", str(target), "-d", str(draft), "--gamma", "3", "--ctx", "1024")
    try:
        yield served
    finally:
        served.stop()


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]


def test_a_required_call_comes_back_as_json_arguments(server: Server) -> None:
    client = server.client()
    answer = client.chat.completions.create(
        model=server.model, messages=ASK, tool_choice="required", **FIELDS
    )
    choice = answer.choices[0]
    calls = calls_of(choice.message)
    assert choice.finish_reason == "tool_calls" and calls, "".join(server.lines[-5:])
    assert all(name == "forecast" and isinstance(args["days"], int) for name, args in calls)
    assert not choice.message.content
    one = client.chat.completions.create(
        model=server.model,
        messages=ASK,
        tool_choice="required",
        parallel_tool_calls=False,
        **FIELDS,
    )
    assert len(calls_of(one.choices[0].message)) == 1


def test_a_streamed_call_is_the_whole_answers(server: Server) -> None:
    client = server.client()
    whole = client.chat.completions.create(
        model=server.model,
        messages=ASK,
        tool_choice="required",
        parallel_tool_calls=False,
        **FIELDS,
    )
    chunks = list(
        client.chat.completions.create(
            model=server.model,
            messages=ASK,
            tool_choice={"type": "function", "function": {"name": "forecast"}},
            parallel_tool_calls=False,
            stream=True,
            **FIELDS,
        )
    )
    streamed = [
        (call.function.name, json.loads(call.function.arguments))
        for chunk in chunks
        for choice in chunk.choices
        for call in choice.delta.tool_calls or ()
    ]
    assert streamed == calls_of(whole.choices[0].message)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    for mark in ("<tool_call>", "to=functions", "tool▁call", "tool_call_begin"):
        assert mark not in text  # the call is not text
