"""The request bodies as the server declares them: each body read into a `GenerationRequest`
or refused with OpenAI's 400 naming the field at fault."""

from __future__ import annotations

from typing import Any

import pytest

from specrun.core.sampling import SamplingParams
from specrun.server import bodies
from specrun.server.bodies import ChatCompletionRequest, CompletionRequest
from specrun.server.requests import (
    UNSUPPORTED,
    ApiError,
    GenerationRequest,
    chat_request,
    checked,
    completion_request,
)

MODELS = {"target": "target", "alias": "target"}
DEFAULTS = SamplingParams(temperature=0.5, top_k=7)
HELLO = [{"role": "user", "content": "hello"}]


def chat(**fields: Any) -> GenerationRequest:
    return chat_request(
        checked(ChatCompletionRequest, {"messages": HELLO, **fields}), MODELS, DEFAULTS
    )


def completion(**fields: Any) -> GenerationRequest:
    return completion_request(
        checked(CompletionRequest, {"prompt": "hi", **fields}), MODELS, DEFAULTS
    )


def refusal(read: Any, **fields: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        read(**fields)
    assert refused.value.status == 400 and "\n" not in str(refused.value)
    return refused.value


# --- bodies into requests -----------------------------------------------------------------------


def test_a_chat_body_becomes_the_request_the_worker_runs():
    request = chat(
        messages=[
            {
                "role": "system",
                "content": [{"type": "text", "text": "be"}, {"type": "text", "text": "brief"}],
            },
            {"role": "user", "content": "weather?", "name": "ann"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "21"},
        ],
        model="alias",
        temperature=1,
        stop="\n",
        logit_bias={" 42 ": -1},
        max_completion_tokens=9,
        stream=True,
        stream_options={"include_usage": True},
        logprobs=True,
        top_logprobs=2,
        n=3,
        user="someone",  # known to OpenAI, ignored here
    )
    system, user, assistant, tool = request.prompt
    assert (system.content, user.content, assistant.content, tool.content) == (
        "be\nbrief",
        "weather?",
        "",
        "21",
    )
    assert [(call.id, call.name, call.arguments) for call in assistant.tool_calls] == [
        ("c1", "f", '{"a": 1}')
    ]
    assert tool.tool_call_id == "c1" and user.tool_call_id is None
    assert request.model == "target" and request.stop == ("\n",) and request.max_tokens == 9
    assert request.params == SamplingParams(temperature=1.0, top_k=7, logit_bias=((42, -1.0),))
    assert (request.stream, request.include_usage, request.logprobs, request.n) == (
        True,
        True,
        2,
        3,
    )


def test_null_is_a_field_left_out():
    asked = chat(temperature=None, stop=None, tools=None, n=None, stream=None)
    assert asked == chat()
    assert asked.params == DEFAULTS and asked.n == 1 and not asked.stream and asked.stop == ()


def test_a_completion_body_keeps_its_text_and_lists_its_logprobs():
    request = completion(prompt="the cat", stop=["a", "b"], logprobs=0, max_tokens=4)
    assert (request.prompt, request.stop, request.logprobs, request.max_tokens) == (
        "the cat",
        ("a", "b"),
        0,
        4,
    )


# --- what is refused, by name -------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, param, code",
    [
        ({"max_tokens": 1.0}, "max_tokens", "invalid_type"),  # strict: no integer by a float
        ({"max_tokens": "5"}, "max_tokens", "invalid_type"),
        ({"temperature": True}, "temperature", "invalid_type"),  # nor a number by a bool
        ({"stream": 1}, "stream", "invalid_type"),
        ({"n": 0}, "n", "invalid_value"),
        ({"n": bodies.MAX_CHOICES + 1}, "n", "invalid_value"),
        ({"messages": "hello"}, "messages", "invalid_type"),
        ({"messages": []}, "messages", "invalid_value"),
        ({"messages": ["hello"]}, "messages[0]", "invalid_type"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "invalid_value"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content",
            "invalid_type",
        ),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
        (
            {"messages": [*HELLO, {"role": "tool", "content": "21"}]},
            "messages[1].tool_call_id",
            "missing_required_parameter",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [{"function": {"name": "f", "arguments": "{"}}],
                    }
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
            "invalid_value",
        ),
        ({"stop": ["a", 1]}, "stop", "invalid_type"),
        ({"logit_bias": {"x": 1}}, "logit_bias", "invalid_value"),
        ({"logit_bias": {"1": "up"}}, "logit_bias", "invalid_value"),
        (
            {"stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage",
            "invalid_type",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "a b"}}]},
            "tools[0].function.name",
            "invalid_value",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
            "tools[0].function.parameters",
            "invalid_type",
        ),
        (
            {"tools": [{"type": "code", "function": {"name": "f"}}]},
            "tools[0].type",
            "invalid_value",
        ),
        ({"tool_choice": "always"}, "tool_choice", "invalid_value"),
        ({"response_format": "json"}, "response_format", "invalid_type"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
            "missing_required_parameter",
        ),
        ({"json_schema": "object"}, "json_schema", "invalid_type"),
        ({"top_logprobs": 99, "logprobs": True}, "top_logprobs", "invalid_value"),
    ],
)
def test_a_chat_field_at_fault_is_named_by_its_path(fields: dict[str, Any], param: str, code: str):
    error = refusal(chat, **fields)
    assert (error.param, error.code) == (param, code)
    assert f"`{param}`" in str(error)


def test_the_message_says_what_was_sent_and_what_is_wanted():
    assert str(refusal(chat, max_tokens=1.5)) == "`max_tokens` must be a valid integer, got 1.5"
    assert str(refusal(chat, messages=["hi"])) == '`messages[0]` must be an object, got "hi"'
    assert str(refusal(chat, messages=[])) == "`messages` must have at least 1 item(s), got []"
    assert str(refusal(completion, prompt=None)) == "missing required field `prompt`"
    assert str(refusal(chat, stop=3)) == "`stop` must be a string or a list of strings, got 3"
    named = refusal(chat, tools=[{"type": "function", "function": {"name": "a b"}}])
    assert str(named) == (
        f"`tools[0].function.name` must match the pattern '{bodies.FUNCTION_NAME}', got \"a b\""
    )


def test_a_field_the_server_does_not_act_on_is_refused_before_the_rest():
    field = next(field for field in UNSUPPORTED if field.name == "echo")
    error = refusal(completion, echo=True, max_tokens="many")
    assert (error.param, error.code) == (field.name, "unsupported_parameter")
