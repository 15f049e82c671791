"""OpenAI's Responses API (`POST /v1/responses`) as its clients meet it: the real `specrun
serve` on tiny models, driven by the `openai` SDK's `client.responses` (its stream helper and
its typed errors included). The same conversation through /v1/chat/completions is the same
greedy answer, with a draft or without one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import httpx
import openai
import pydantic
import pytest

from tests.support.server import Server
from tests.support.tinymodels import write_template_model

KEYS = ("first-key", "second-key")  # two tenants: each continues only its own responses
ASKED = {"temperature": 0, "max_output_tokens": 24}
INSTRUCTIONS = "answer in words"
CONVERSATION = [  # as chat's messages: the same conversation as INPUT, with INSTRUCTIONS
    {"role": "system", "content": INSTRUCTIONS},
    {"role": "user", "content": "the sea"},
    {"role": "assistant", "content": "is blue"},
    {"role": "user", "content": "and the sun"},
]
INPUT = [
    {"role": "user", "content": "the sea"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "is blue"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and the sun"}]},
]
CALL_TOKENS = 200  # the tiny model writes a call's JSON a byte a token
CITY = {"type": "string", "enum": ["Paris", "Rome"]}
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": CITY},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class Weather(pydantic.BaseModel):
    """What a structured answer must parse as."""

    city: Literal["Paris", "Rome"]
    sunny: bool


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path):
    keys = [option for key in KEYS for option in ("--api-key", key)]
    running = Server("-t", str(tiny_target), "-d", str(tiny_draft), "--gamma", "3", *keys)
    yield running
    assert running.stop() == 0
    assert "Traceback" not in "".join(running.lines)


@pytest.fixture(scope="module")
def plain(tiny_target: Path):
    """The target alone: what every drafted greedy answer must equal."""
    running = Server("-t", str(tiny_target), "-d", "none")
    yield running
    assert running.stop() == 0


def client(server: Server, key: str = KEYS[0]) -> openai.OpenAI:
    return server.client(key)


def respond(server: Server, key: str = KEYS[0], **fields: object):
    return client(server, key).responses.create(model=server.model, **{**ASKED, **fields})


# --- answers ---------------------------------------------------------------------------------


def test_a_whole_response(server):
    response = respond(server, input="the cat is", instructions=INSTRUCTIONS, metadata={"a": "b"})
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.model == server.model and response.metadata == {"a": "b"}
    (message,) = response.output
    assert (message.type, message.role, message.content[0].type) == (
        "message",
        "assistant",
        "output_text",
    )
    assert response.output_text == message.content[0].text != ""
    usage, figures = response.usage, response.model_extra["specrun"]
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert (figures["prompt_tokens"], figures["generated_tokens"]) == (
        usage.input_tokens,
        usage.output_tokens,
    )
    assert figures["drafted"] > 0  # the speculation underneath, as chat reports it
    finished = {"stop": "completed", "length": "incomplete"}[figures["finish_reason"]]
    assert response.status == message.status == finished


def test_a_response_cut_by_its_limit_is_incomplete(server):
    response = respond(server, input="the cat is", max_output_tokens=2)
    assert response.status == "incomplete" and response.usage.output_tokens == 2
    assert response.incomplete_details.reason == "max_output_tokens"


def test_a_streamed_response_is_the_whole_one(server):
    whole = respond(server, input="the sea")
    assert whole.status == "completed"  # the SDK's helper finishes on response.completed
    with client(server).responses.stream(model=server.model, input="the sea", **ASKED) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ] and [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert "".join(deltas) == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.model_extra["specrun"]["generated_tokens"] == whole.usage.output_tokens


def test_a_streamed_response_cut_by_its_limit_ends_incomplete(server):
    stream = respond(server, input="the cat is", max_output_tokens=3, stream=True)
    events = list(stream)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert events[-1].response.output[0].status == "incomplete"


@pytest.mark.parametrize("drafted", [True, False], ids=["with a draft", "without"])
def test_greedy_identity_with_chat_completions(server, plain, drafted):
    """The same conversation, as Responses items or as chat messages, is the same answer;
    drafted or not, it is plain decoding's."""
    running, key = (server, KEYS[0]) if drafted else (plain, "unused")
    response = respond(running, key, input=INPUT, instructions=INSTRUCTIONS)
    chat = client(running, key).chat.completions.create(
        model=running.model, messages=CONVERSATION, temperature=0, max_tokens=24
    )
    plain_chat = client(plain, "unused").chat.completions.create(
        model=plain.model, messages=CONVERSATION, temperature=0, max_tokens=24
    )
    assert response.output_text == chat.choices[0].message.content
    assert response.output_text == plain_chat.choices[0].message.content
    assert response.usage.input_tokens == chat.usage.prompt_tokens


# --- tools and structured output -------------------------------------------------------------


QUESTION = [{"role": "user", "content": "the weather in Paris?"}]
TOOLED = {"tools": [WEATHER_TOOL], "max_output_tokens": CALL_TOKENS}
SKY = '{"sky": "clear"}'


def chat_after_calls(server: Server, calls: list) -> object:
    """The same turn in chat's words: the calls as one assistant message, then their results."""
    said = [
        {
            "id": c.call_id,
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments},
        }
        for c in calls
    ]
    results = [{"role": "tool", "tool_call_id": c.call_id, "content": SKY} for c in calls]
    return client(server).chat.completions.create(
        model=server.model,
        messages=[*QUESTION, {"role": "assistant", "content": None, "tool_calls": said}, *results],
        tools=[{"type": "function", "function": WEATHER_TOOL}],
        temperature=0,
        max_tokens=CALL_TOKENS,
    )


@pytest.mark.parametrize("parallel", [False, True], ids=["one call", "parallel calls"])
def test_a_tool_round_trip_whole_streamed_and_continued(server, parallel):
    """A required call is a function_call item (one, or several under parallel_tool_calls),
    whole or streamed; its results sent back with the calls, or after the stored response
    (previous_response_id), are the same prompt as chat's, and the same answer."""
    forced = {**TOOLED, "tool_choice": "required", "parallel_tool_calls": parallel}
    first = respond(server, input=QUESTION, **forced)
    calls = first.output
    assert (len(calls) > 1) == parallel and len({c.call_id for c in calls}) == len(calls)
    for call in calls:
        assert (call.type, call.name, call.status) == ("function_call", "get_weather", "completed")
        assert json.loads(call.arguments)["city"] in CITY["enum"]
    assert (first.status, first.output_text, first.parallel_tool_calls) == (
        "completed",
        "",
        parallel,
    )

    with client(server).responses.stream(
        model=server.model, input=QUESTION, **{**ASKED, **forced}
    ) as stream:
        events = list(stream)
        streamed = stream.get_final_response()
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert done == [c.arguments for c in streamed.output] == [c.arguments for c in calls]

    results = [{"type": "function_call_output", "call_id": c.call_id, "output": SKY} for c in calls]
    resent = respond(
        server, input=[*QUESTION, *(c.model_dump() for c in calls), *results], **TOOLED
    )
    continued = respond(server, input=results, previous_response_id=first.id, **TOOLED)
    chat = chat_after_calls(server, calls)
    assert continued.previous_response_id == first.id
    assert (continued.output_text, continued.usage.input_tokens) == (
        resent.output_text,
        resent.usage.input_tokens,
    )
    assert resent.output_text == (chat.choices[0].message.content or "")
    assert resent.usage.input_tokens == chat.usage.prompt_tokens


def test_a_named_tool_choice_calls_that_tool(server):
    response = respond(
        server,
        input="the weather?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=CALL_TOKENS,
    )
    assert response.output and {item.name for item in response.output} == {"get_weather"}
    assert response.tool_choice.name == "get_weather"


def test_structured_output_parses_against_its_schema(server):
    parsed = client(server).responses.parse(
        model=server.model,
        input="the weather in Paris?",
        text_format=Weather,
        temperature=0,
        max_output_tokens=CALL_TOKENS,
    )
    assert isinstance(parsed.output_parsed, Weather), parsed.output_text
    # Any object: the tiny model's strings never end, but the answer is one's beginning.
    any_object = respond(server, input="the sea", text={"format": {"type": "json_object"}})
    assert any_object.output_text.startswith("{") and any_object.text.format.type == "json_object"
    assert not respond(server, input="the sea").output_text.startswith("{")


# --- reasoning ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def thinker(tmp_path_factory: pytest.TempPathFactory):
    """DeepSeek-R1's real template, which opens the thought in the prompt when asked to
    think: all the tiny model writes is then thinking."""
    folder = tmp_path_factory.mktemp("responses-reasoning")
    model = write_template_model(folder / "r1.gguf", "deepseek-r1")
    running = Server("-t", str(model), "--temp", "0")
    yield running
    assert running.stop() == 0


def test_thinking_is_a_reasoning_item_whole_and_streamed(thinker):
    thinking = {"input": "the sea", "reasoning": {"effort": "high"}, "max_output_tokens": 12}
    whole = respond(thinker, "unused", **thinking)
    (reasoning,) = whole.output
    assert reasoning.type == "reasoning" and reasoning.summary == []
    thought = reasoning.content[0].text
    assert reasoning.content[0].type == "reasoning_text" and thought
    events = list(respond(thinker, "unused", **thinking, stream=True))
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    (done,) = [e for e in events if e.type == "response.reasoning_text.done"]
    assert "".join(deltas) == done.text == thought
    assert events[-1].response.output[0].content[0].text == thought
    chat = client(thinker, "unused").chat.completions.create(
        model=thinker.model,
        messages=[{"role": "user", "content": "the sea"}],
        max_tokens=12,
        extra_body={"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": True}},
    )
    assert chat.choices[0].message.model_extra["reasoning_content"] == thought
    unthought = respond(thinker, "unused", **{**thinking, "reasoning": {"effort": "none"}})
    assert [item.type for item in unthought.output] == ["message"]


# --- stored responses ----------------------------------------------------------------------


def test_a_response_is_continued_only_by_its_own_key(server):
    first = respond(server, input="the sea")
    assert respond(server, input="and", previous_response_id=first.id).status
    with pytest.raises(openai.BadRequestError) as refused:
        respond(server, KEYS[1], input="and", previous_response_id=first.id)
    assert (refused.value.param, refused.value.code) == (
        "previous_response_id",
        "previous_response_not_found",
    )


def test_a_response_not_stored_cannot_be_continued(server):
    unstored = respond(server, input="the sea", store=False)
    with pytest.raises(openai.BadRequestError) as refused:
        respond(server, input="and", previous_response_id=unstored.id)
    assert refused.value.code == "previous_response_not_found"


# --- errors ------------------------------------------------------------------------------------

IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
ERRORS = {
    "an image": (
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}, IMAGE]}]},
        "input[0].content",
        "no images",
    ),
    "an unknown previous response": (
        {"input": "hi", "previous_response_id": "resp_nowhere"},
        "previous_response_id",
        "resp_nowhere",
    ),
    "a temperature out of range": ({"input": "hi", "temperature": -1}, "temperature", "-1"),
    "an item of an unknown type": (
        {"input": [{"type": "web_search_call", "id": "x"}]},
        "input[0].type",
        "web_search_call",
    ),
    "a call whose arguments are not JSON": (
        {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]},
        "input[0].arguments",
        "JSON text",
    ),
    "a result without its call": (
        {"input": [{"type": "function_call_output", "output": "21"}]},
        "input[0].call_id",
        "missing",
    ),
    "a hosted tool": ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]", "hosted"),
    "a required call's schema no grammar can be made of": (
        {
            "input": "hi",
            "tools": [{"type": "function", "name": "f", "parameters": {"properties": 5}}],
            "tool_choice": "required",
        },
        "tools[0].parameters",
        "",
    ),
    "a schema format without its schema": (
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
        "text.format.schema",
        "missing",
    ),
    "a schema format with a false schema": (
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": False}}},
        "text.format.schema",
        "allows no value",
    ),
    "an effort for a model that does not think": (
        {"input": "hi", "reasoning": {"effort": "high"}},
        "reasoning.effort",
        "does not",
    ),
    "a background response": ({"input": "hi", "background": True}, "background", "waits"),
    "nothing to answer": ({"input": []}, "input", "at least 1"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_errors_are_the_sdks_typed_exceptions_naming_the_field(server, case):
    fields, param, said = ERRORS[case]
    with pytest.raises(openai.BadRequestError) as refused:
        client(server).responses.create(model=server.model, **fields)
    error = refused.value
    assert (error.status_code, error.param) == (400, param), error.body
    assert said in error.message and "\n" not in error.message


def test_an_unknown_model_and_a_missing_key_are_openais_errors(server):
    with pytest.raises(openai.NotFoundError) as unknown:
        client(server).responses.create(model="nowhere", input="hi")
    assert (unknown.value.param, unknown.value.code) == ("model", "model_not_found")
    with pytest.raises(openai.AuthenticationError) as keyless:
        client(server, "wrong").responses.create(model=server.model, input="hi")
    assert keyless.value.code == "invalid_api_key"


def test_the_openapi_document_has_the_body(server):
    headers = {"Authorization": f"Bearer {KEYS[0]}"}
    document = httpx.get(f"{server.url}/openapi.json", headers=headers).json()
    body = document["paths"]["/v1/responses"]["post"]["requestBody"]
    reference = body["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][reference.rsplit("/", 1)[-1]]
    assert {"input", "previous_response_id", "tools", "text", "stream"} <= schema[
        "properties"
    ].keys()
