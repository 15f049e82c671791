"""Anthropic's Messages API of `specrun serve`, as its clients meet it: the real command on a
free port, spoken to with the official `anthropic` SDK (and httpx where the raw events or
headers are the point), against the same server's OpenAI routes."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.support.server import Server
from tests.support.tinymodels import write_template_model

KEY = "test-key"
GREEDY = {"temperature": 0}  # the SDK no longer declares sampling fields; the API still takes them
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}},
        "required": ["city"],
    },
}
CONVERSATION = [
    {"role": "user", "content": "the cat is"},
    {"role": "assistant", "content": [{"type": "text", "text": "a dog"}]},
    {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "text", "text": "sea"}]},
]
SYSTEM = [{"type": "text", "text": "the sea"}, {"type": "text", "text": "is blue"}]


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path):
    running = Server(
        "-t", str(tiny_target), "-d", str(tiny_draft), "--gamma", "3", "--api-key", KEY
    )
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def plain_server(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory):
    """The same target decoding plainly: the answers speculation must give; and `r1`, with
    DeepSeek-R1's real template, whose prompt opens the thought its answer goes on with."""
    r1 = write_template_model(tmp_path_factory.mktemp("anthropic") / "r1.gguf", "deepseek-r1")
    running = Server("-t", str(tiny_target), "-d", "none", "--model", str(r1), "--api-key", KEY)
    yield running
    assert running.stop() == 0


def client(server: Server, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=60)


def create(server: Server, **fields: object) -> anthropic.types.Message:
    asked = {"model": server.model, "max_tokens": 24, "extra_body": GREEDY}
    asked["messages"] = [{"role": "user", "content": "hello world"}]
    return client(server).messages.create(**{**asked, **fields})


def text(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def events(server: Server, body: dict) -> list[tuple[str, dict]]:
    """A streamed answer's events, each as its `event:` name and its data."""
    request = {"model": server.model, "max_tokens": 24, "stream": True, **GREEDY, **body}
    with httpx.stream(
        "POST", f"{server.url}/v1/messages", json=request, headers={"x-api-key": KEY}, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines[::2]]
    data = [json.loads(line.removeprefix("data: ")) for line in lines[1::2]]
    assert [record["type"] for record in data] == names  # each name repeats its data's type
    return list(zip(names, data))


# --- answers ---------------------------------------------------------------------------------


def test_a_whole_answer_is_a_message_with_usage_and_figures(server):
    message = create(server)
    assert (message.type, message.role, message.model) == ("message", "assistant", server.model)
    assert message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"] and text(message)
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    chat = server.client(KEY).chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": "hello world"}],
        max_tokens=24,
        temperature=0,
    )
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert usage.output_tokens == chat.usage.completion_tokens
    figures = message.model_extra["specrun"]
    assert figures["generated_tokens"] == usage.output_tokens and figures["drafted"] > 0


def test_a_streamed_answer_is_the_whole_one_in_anthropics_events(server):
    whole = create(server)
    with client(server).messages.stream(
        model=server.model,
        max_tokens=24,
        extra_body=GREEDY,
        messages=[{"role": "user", "content": "hello world"}],
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text(whole) == text(final)
    assert (final.stop_reason, final.usage.output_tokens) == (
        whole.stop_reason,
        whole.usage.output_tokens,
    )
    raw = events(server, {"messages": [{"role": "user", "content": "hello world"}]})
    names = [name for name, _ in raw]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[1] == "content_block_start" and names[-3] == "content_block_stop"
    assert set(names[2:-3]) == {"content_block_delta"}
    assert raw[0][1]["message"]["content"] == [] and raw[0][1]["message"]["stop_reason"] is None
    last = raw[-2][1]
    assert last["delta"]["stop_reason"] == whole.stop_reason
    assert last["usage"]["output_tokens"] == last["specrun"]["generated_tokens"]


@pytest.mark.parametrize("drafted", [True, False], ids=["draft", "plain"])
def test_greedy_messages_and_chat_give_the_same_text(server, plain_server, drafted):
    """One conversation, a system text as blocks, through both APIs: the same answer, with a
    draft or without (speculation changes nothing of a greedy answer)."""
    running = server if drafted else plain_server
    message = create(running, system=SYSTEM, messages=CONVERSATION, max_tokens=20)
    chat = running.client(KEY).chat.completions.create(
        model=running.model,
        messages=[
            {"role": "system", "content": "the sea\nis blue"},
            {"role": "user", "content": "the cat is"},
            {"role": "assistant", "content": "a dog"},
            {"role": "user", "content": "and\nsea"},
        ],
        max_tokens=20,
        temperature=0,
    )
    assert text(message) == chat.choices[0].message.content
    plain = create(plain_server, system=SYSTEM, messages=CONVERSATION, max_tokens=20)
    assert text(message) == text(plain)


def test_a_stop_sequence_ends_the_answer_and_is_named(server):
    answer = text(create(server, max_tokens=24))
    stop = answer[6:9]  # text the answer holds past its start
    cut = answer[: answer.index(stop)]
    message = create(server, max_tokens=24, stop_sequences=["never in it", stop])
    assert (text(message), message.stop_reason, message.stop_sequence) == (
        cut,
        "stop_sequence",
        stop,
    )
    raw = events(server, {"messages": [{"role": "user", "content": "hello world"}],
                          "stop_sequences": ["never in it", stop]})  # fmt: skip
    assert raw[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": stop}


def test_thinking_comes_in_thinking_blocks(server, plain_server):
    asked = {
        "model": "r1",
        "max_tokens": 12,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    message = create(plain_server, **asked)
    thought = message.content[0]
    assert thought.type == "thinking" and thought.thinking and thought.signature == ""
    with client(plain_server).messages.stream(
        messages=[{"role": "user", "content": "hello world"}], extra_body=GREEDY, **asked
    ) as stream:
        final = stream.get_final_message()
    assert final.content == message.content
    raw = events(plain_server, {"messages": [{"role": "user", "content": "hello world"}], **asked})
    started = [data["content_block"] for name, data in raw if name == "content_block_start"]
    assert started[0] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [data["delta"]["type"] for name, data in raw if name == "content_block_delta"]
    assert deltas[0] == "thinking_delta" and "signature_delta" in deltas
    with pytest.raises(anthropic.BadRequestError) as refused:  # a model that does not think
        create(server, thinking={"type": "enabled", "budget_tokens": 1024})
    assert "`thinking`" in refused.value.message


# --- tools -----------------------------------------------------------------------------------


def test_a_tool_round_trip(server):
    """`any` forces a call, whose input keeps to the schema; the call and its result go back as
    tool_use and tool_result blocks, and reach the prompt."""
    asked: dict = {"tools": [WEATHER], "max_tokens": 200}
    question = {"role": "user", "content": "the weather in Paris?"}
    several = create(server, messages=[question], tool_choice={"type": "any"}, **asked)
    assert several.stop_reason == "tool_use"
    for use in [block for block in several.content if block.type == "tool_use"]:
        assert use.name == "get_weather" and isinstance(use.input["city"], str)
        assert len(use.input["city"]) <= 8 and set(use.input) == {"city"}
    one = {"type": "any", "disable_parallel_tool_use": True}
    called = create(server, messages=[question], tool_choice=one, **asked)
    [use] = [block for block in called.content if block.type == "tool_use"]
    assert use.input == next(b.input for b in several.content if b.type == "tool_use")
    with client(server).messages.stream(
        model=server.model, messages=[question], tool_choice=one, extra_body=GREEDY, **asked
    ) as stream:
        streamed = stream.get_final_message()
    assert [(b.type, b.name, b.input) for b in streamed.content if b.type == "tool_use"] == [
        ("tool_use", use.name, use.input)
    ]

    def conversation(result: str) -> list[dict]:
        return [
            question,
            {"role": "assistant", "content": [block.model_dump() for block in called.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": result}],
            },
        ]

    final = create(
        server, messages=conversation("sunny, 21 C"), tool_choice={"type": "none"}, **asked
    )
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert all(block.type == "text" for block in final.content)
    counts = [
        client(server)
        .messages.count_tokens(model=server.model, messages=conversation(result), tools=[WEATHER])
        .input_tokens
        for result in ("", "sunny, 21 C")
    ]
    assert counts[1] > counts[0]  # the result is in the prompt


def test_structured_output_by_a_forced_tool_and_by_output_config(server):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    record = {"name": "record", "input_schema": schema}
    forced = create(
        server,
        tools=[record],
        tool_choice={"type": "tool", "name": "record", "disable_parallel_tool_use": True},
        max_tokens=200,
    )
    [use] = forced.content
    assert use.type == "tool_use" and set(use.input) == {"name", "age"}
    assert isinstance(use.input["name"], str) and isinstance(use.input["age"], int)
    shaped = create(
        server, output_config={"format": {"type": "json_schema", "schema": schema}}, max_tokens=200
    )
    value = json.loads(text(shaped))
    assert isinstance(value["name"], str) and isinstance(value["age"], int)


# --- errors, keys, counting ------------------------------------------------------------------


def test_errors_are_the_sdks_typed_exceptions_with_anthropics_types(server):
    with pytest.raises(anthropic.BadRequestError) as missing:
        client(server).post(
            "/v1/messages",
            body={"model": server.model, "messages": [{"role": "user", "content": "hi"}]},
            cast_to=anthropic.types.Message,
        )
    assert missing.value.body["error"]["type"] == "invalid_request_error"
    assert "`max_tokens`" in missing.value.message
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    with pytest.raises(anthropic.BadRequestError) as unread:
        create(server, messages=[{"role": "user", "content": [image]}])
    assert unread.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "`messages[0].content[0]` is an image block, which this server cannot "
            "read: its models take text only",
        },
    }
    with pytest.raises(anthropic.AuthenticationError) as refused:
        client(server, key="wrong").messages.create(
            model=server.model, max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    assert refused.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        create(server, model="claude-sonnet-4-5")
    assert unknown.value.body["error"]["type"] == "not_found_error"
    assert "`claude-sonnet-4-5`" in unknown.value.message


def test_the_key_goes_in_x_api_key_or_as_a_bearer(server):
    body = {"model": server.model, "max_tokens": 2, "messages": [{"role": "user", "content": "a"}]}
    url = f"{server.url}/v1/messages"
    assert httpx.post(url, json=body, headers={"x-api-key": KEY}, timeout=60).status_code == 200
    bearer = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(url, json=body, headers=bearer, timeout=60).status_code == 200
    none = httpx.post(url, json=body, timeout=60)
    assert none.status_code == 401
    assert none.json()["type"] == "error"
    assert none.json()["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):  # OpenAI's routes take the same keys
        server.client("wrong").models.list()


def test_count_tokens_is_the_prompt_a_generation_reads(server):
    counted = client(server).messages.count_tokens(
        model=server.model, system=SYSTEM, messages=CONVERSATION, tools=[WEATHER]
    )
    message = create(server, system=SYSTEM, messages=CONVERSATION, tools=[WEATHER], max_tokens=1)
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens
    bare = client(server).messages.count_tokens(model=server.model, messages=CONVERSATION)
    assert bare.input_tokens < counted.input_tokens  # the tools and the system text count


def test_the_openapi_document_declares_the_bodies(server):
    document = httpx.get(f"{server.url}/openapi.json", headers={"x-api-key": KEY}).json()
    for path, body in (
        ("/v1/messages", "anthropic_MessagesRequest"),
        ("/v1/messages/count_tokens", "anthropic_CountTokensRequest"),
    ):
        schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert schema["schema"] == {"$ref": f"#/components/schemas/{body}"}
    declared = document["components"]["schemas"]["anthropic_MessagesRequest"]
    assert {"model", "max_tokens", "messages"} <= set(declared["required"])
