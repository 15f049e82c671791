"""The request bodies as the server declares them: each body read into a `GenerationRequest`
or refused with OpenAI's 400 naming the field at fault, and the OpenAPI document that
publishes those declarations at /openapi.json (OpenAI's and each API family's), held to what
the server really refuses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from specrun.core.sampling import SamplingParams
from specrun.server import anthropic, bodies, ollama, requests, responses
from specrun.server.app import Api
from specrun.server.bodies import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    InfillRequest,
    RouteBody,
)
from specrun.server.pool import ModelPool, Served
from specrun.server.requests import (
    UNSUPPORTED,
    ApiError,
    GenerationRequest,
    chat_request,
    checked,
    completion_request,
    validated,
)
from specrun.server.worker import Worker

MODELS = {"target": "target", "alias": "target"}
DEFAULTS = SamplingParams(temperature=0.5, top_k=7)
HELLO = [{"role": "user", "content": "hello"}]
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
VALID = {CHAT: {"messages": HELLO}, COMPLETIONS: {"prompt": "hi"}}


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


def no_model() -> Any:
    raise AssertionError("no request in these tests reaches a model")


@contextmanager
def serving(api_key: str | None = None, cors: tuple[str, ...] = ()) -> Iterator[TestClient]:
    """The server's app over a worker whose model never loads: every request here is
    answered, or refused, before it would."""
    worker = Worker(ModelPool([Served("target", no_model)]), queue=1, defaults=DEFAULTS)
    try:
        app = Api(worker).app((api_key,) if api_key else (), cors=cors)
        with TestClient(app, base_url="http://127.0.0.1") as test_client:
            yield test_client
    finally:
        worker.close()


@pytest.fixture
def client() -> Iterator[TestClient]:
    with serving() as test_client:
        yield test_client


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


BOUNDS = f"at most {bodies.MAX_STOPS} strings of at most {bodies.MAX_STOP_CHARS} characters each"


@pytest.mark.parametrize(
    "stop",
    [
        "x" * (bodies.MAX_STOP_CHARS + 1),
        ["a"] * (bodies.MAX_STOPS + 1),
        ["a", "x" * (bodies.MAX_STOP_CHARS + 1)],
    ],
    ids=["a long string", "many strings", "a long string in a list"],
)
def test_stop_strings_beyond_the_bounds_are_refused_saying_the_bounds(stop: Any) -> None:
    error = refusal(completion, stop=stop)
    assert (error.param, error.code) == ("stop", "invalid_value")
    assert str(error).startswith(f"`stop` must be {BOUNDS}, got ")
    at_the_bounds = ["x" * bodies.MAX_STOP_CHARS] * bodies.MAX_STOPS
    assert completion(stop=at_the_bounds).stop == tuple(at_the_bounds)


def test_echoed_input_is_cut_in_every_error() -> None:
    """A 1 MB model name, function name or token id comes back as its start, not whole."""
    name = "m" * 2**20
    with pytest.raises(ApiError) as unknown:
        chat(model=name)
    cut = f"`{name[: requests.MAX_ECHOED_CHARS]}... ({2**20} characters)`"
    assert unknown.value.status == 404 and cut in str(unknown.value)
    assert len(str(unknown.value)) < 300
    tools = [TOOL]
    choice = {"type": "function", "function": {"name": name}}
    assert len(str(refusal(chat, tools=tools, tool_choice=choice))) < 300
    error = refusal(completion, logit_bias={"1" * 5000: 1.0})  # int() refuses 4300 digits
    assert error.param == "logit_bias" and len(str(error)) < 300


def test_a_sampling_value_out_of_range_names_the_bodys_field() -> None:
    """The library's `penalty_last_n` is llama-server's `repeat_last_n` in a body."""
    error = refusal(chat, repeat_last_n=-5)
    assert (error.param, error.code) == ("repeat_last_n", "invalid_value")
    assert "`repeat_last_n`" in str(error) and "penalty_last_n" not in str(error)


def test_a_field_the_server_does_not_act_on_is_refused_before_the_rest():
    field = next(field for field in UNSUPPORTED if field.name == "echo")
    error = refusal(completion, echo=True, max_tokens="many")
    assert (error.param, error.code) == (field.name, "unsupported_parameter")


# --- the gates before the routes ---------------------------------------------------------------

KEY = "clé-ü"


@pytest.mark.parametrize(
    "sent, status",
    [
        (b"Bearer " + KEY.encode(), 200),
        (b"bearer " + KEY.encode(), 200),  # RFC 7235: the scheme in any case
        (b"BEARER  " + KEY.encode(), 200),
        (b"Bearer " + KEY.encode()[:-1], 401),
        (b"Basic " + KEY.encode(), 401),
        (KEY.encode(), 401),
    ],
)
def test_the_key_is_its_utf8_bytes_after_the_bearer_scheme(sent: bytes, status: int) -> None:
    with serving(api_key=KEY) as client:
        answer = client.get("/v1/models", headers=[(b"Authorization", sent)])
        assert answer.status_code == status, answer.text
        if status == 401:
            assert answer.json()["error"]["code"] == "invalid_api_key"


def test_a_refused_preflight_is_an_error_in_the_apis_shape() -> None:
    with serving(cors=("http://localhost:3000",)) as client:
        refused = client.options(
            COMPLETIONS,
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"},
        )
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    assert refused.json() == {
        "error": {
            "message": "a page from `http://evil.example` may not call this API (not allowed: "
            "origin, method); start the server with --cors http://evil.example to let it in",
            "type": "invalid_request_error",
            "param": None,
            "code": "cors_not_allowed",
        }
    }


# --- the OpenAPI document -----------------------------------------------------------------------


def test_the_document_states_the_bounds_of_the_stop_strings(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for body in ("ChatCompletionRequest", "CompletionRequest"):
        string, strings, null = schemas[body]["properties"]["stop"]["anyOf"]
        assert string == {"type": "string", "maxLength": bodies.MAX_STOP_CHARS}
        assert strings == {"type": "array", "items": string, "maxItems": bodies.MAX_STOPS}


# The module that declares each family's models, by the name before theirs in the document.
NAMESPACES = {"": bodies, "anthropic": anthropic, "responses": responses, "ollama": ollama}


def declared(name: str) -> type[BaseModel]:
    namespace, _, model_name = name.rpartition("_")
    model = getattr(NAMESPACES[namespace], model_name)
    assert issubclass(model, BaseModel)
    return model


def test_the_document_lists_every_route_and_the_body_each_takes(client: TestClient):
    response = client.get("/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    document = response.json()
    assert document["openapi"].startswith("3.1")
    app = client.app
    assert isinstance(app, Starlette)
    routes = {route.path: route.methods for route in app.routes if isinstance(route, Route)}
    assert document["paths"].keys() == routes.keys()
    for path, methods in routes.items():
        assert document["paths"][path].keys() == {m.lower() for m in methods} - {"head"}
    for path, model in ((CHAT, "ChatCompletionRequest"), (COMPLETIONS, "CompletionRequest")):
        body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": f"#/components/schemas/{model}"}
    assert all(
        "requestBody" not in operation["get"]
        for path, operation in document["paths"].items()
        if "get" in operation
    )


def test_the_document_names_every_field_each_model_declares(client: TestClient):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"ChatMessage", "ToolDefinition", "ResponseFormat", "StreamOptions"} <= schemas.keys()
    # Two families declare a ToolDefinition each: each is named by its family.
    assert {"anthropic_ToolDefinition", "responses_FunctionTool", "ollama_ChatBody"} <= (
        schemas.keys()
    )
    for name, schema in schemas.items():
        fields = declared(name).model_fields
        assert schema["properties"].keys() == {field.alias or key for key, field in fields.items()}
        assert set(schema.get("required", ())) == {
            field.alias or key for key, field in fields.items() if field.is_required()
        }


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_field_the_document_requires_is_refused_when_missing(client: TestClient, path: str):
    document = client.get("/openapi.json").json()
    body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    name = body["schema"]["$ref"].rpartition("/")[2]
    required = document["components"]["schemas"][name]["required"]
    assert required and set(required) <= VALID[path].keys()
    for field in required:
        response = client.post(path, json={k: v for k, v in VALID[path].items() if k != field})
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "message": f"missing required field `{field}`",
                "type": "invalid_request_error",
                "param": field,
                "code": "missing_required_parameter",
            }
        }


TOOL = {"type": "function", "function": {"name": "f"}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


INFILL = {"input_prefix": "def f():", "input_suffix": "return 1"}
MESSAGES = {"model": "target", "messages": HELLO, "max_tokens": 8}  # Anthropic's
OLLAMA_CHAT = {"model": "target", "messages": HELLO}
RESPONSES_TOOL = {"type": "function", "name": "f"}


def in_chat(**fields: Any) -> dict[str, Any]:
    return {"messages": HELLO, **fields}


def in_messages(*blocks: dict[str, Any], role: str = "user", **fields: Any) -> dict[str, Any]:
    """An Anthropic body, whose one message holds `blocks` (none: its text)."""
    content = list(blocks) or "hello"
    return {**MESSAGES, "messages": [{"role": role, "content": content}], **fields}


def read(model: type[BaseModel], body: dict[str, Any]) -> BaseModel:
    """A body as its route reads it: OpenAI's routes by `checked`, which refuses their
    unsupported fields first; the families' (anthropic.py, responses.py, ollama.py) by
    `validated`."""
    return checked(model, body) if issubclass(model, RouteBody) else validated(model, body)


# Each declared object that has required fields: where it sits in a body, a sound example of
# it, and the body that holds it.
PLACES: dict[str, tuple[type[BaseModel], str, dict[str, Any], Any]] = {
    "ChatCompletionRequest": (ChatCompletionRequest, "", VALID[CHAT], lambda o: o),
    "CompletionRequest": (CompletionRequest, "", VALID[COMPLETIONS], lambda o: o),
    "ChatMessage": (ChatCompletionRequest, "messages[0].", HELLO[0], lambda o: {"messages": [o]}),
    "TextPart": (
        ChatCompletionRequest,
        "messages[0].content[0].",
        {"type": "text", "text": "hi"},
        lambda o: {"messages": [{"role": "user", "content": [o]}]},
    ),
    "AssistantToolCall": (
        ChatCompletionRequest,
        "messages[0].tool_calls[0].",
        CALL,
        lambda o: {"messages": [{"role": "assistant", "tool_calls": [o]}]},
    ),
    "FunctionCall": (
        ChatCompletionRequest,
        "messages[0].tool_calls[0].function.",
        CALL["function"],
        lambda o: {"messages": [{"role": "assistant", "tool_calls": [{"function": o}]}]},
    ),
    "ToolDefinition": (ChatCompletionRequest, "tools[0].", TOOL, lambda o: in_chat(tools=[o])),
    "FunctionDefinition": (
        ChatCompletionRequest,
        "tools[0].function.",
        TOOL["function"],
        lambda o: in_chat(tools=[{"type": "function", "function": o}]),
    ),
    "NamedToolChoice": (
        ChatCompletionRequest,
        "tool_choice.",
        {"type": "function", "function": {"name": "f"}},
        lambda o: in_chat(tools=[TOOL], tool_choice=o),
    ),
    "FunctionName": (
        ChatCompletionRequest,
        "tool_choice.function.",
        {"name": "f"},
        lambda o: in_chat(tools=[TOOL], tool_choice={"type": "function", "function": o}),
    ),
    "ResponseFormat": (
        ChatCompletionRequest,
        "response_format.",
        {"type": "json_object"},
        lambda o: in_chat(response_format=o),
    ),
    "JsonSchemaFormat": (
        ChatCompletionRequest,
        "response_format.json_schema.",
        {"name": "x", "schema": {"type": "object"}},
        lambda o: in_chat(response_format={"type": "json_schema", "json_schema": o}),
    ),
    "EmbeddingRequest": (EmbeddingRequest, "", {"input": "hi"}, lambda o: o),
    "InfillRequest": (InfillRequest, "", INFILL, lambda o: o),
    "InfillChunk": (
        InfillRequest,
        "input_extra[0].",
        {"text": "hi"},
        lambda o: {**INFILL, "input_extra": [o]},
    ),
    # Anthropic's Messages
    "anthropic_MessagesRequest": (anthropic.MessagesRequest, "", MESSAGES, lambda o: o),
    "anthropic_CountTokensRequest": (
        anthropic.CountTokensRequest,
        "",
        {"model": "target", "messages": HELLO},
        lambda o: o,
    ),
    "anthropic_InputMessage": (
        anthropic.MessagesRequest,
        "messages[0].",
        HELLO[0],
        lambda o: {**MESSAGES, "messages": [o]},
    ),
    "anthropic_TextBlock": (
        anthropic.MessagesRequest,
        "messages[0].content[0].",
        {"type": "text", "text": "hi"},
        in_messages,
    ),
    "anthropic_UnreadBlock": (
        anthropic.MessagesRequest,
        "messages[0].content[0].",
        {"type": "image"},
        in_messages,
    ),
    "anthropic_ToolResultBlock": (
        anthropic.MessagesRequest,
        "messages[0].content[0].",
        {"type": "tool_result", "tool_use_id": "c1"},
        in_messages,
    ),
    "anthropic_ToolUseBlock": (
        anthropic.MessagesRequest,
        "messages[0].content[0].",
        {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
        lambda o: in_messages(o, role="assistant"),
    ),
    "anthropic_ThinkingBlock": (
        anthropic.MessagesRequest,
        "messages[0].content[0].",
        {"type": "thinking"},
        lambda o: in_messages(o, role="assistant"),
    ),
    "anthropic_ToolDefinition": (
        anthropic.MessagesRequest,
        "tools[0].",
        {"name": "f", "input_schema": {"type": "object"}},
        lambda o: in_messages(tools=[o]),
    ),
    "anthropic_ToolChoice": (
        anthropic.MessagesRequest,
        "tool_choice.",
        {"type": "auto"},
        lambda o: in_messages(tool_choice=o),
    ),
    "anthropic_ThinkingConfig": (
        anthropic.MessagesRequest,
        "thinking.",
        {"type": "enabled"},
        lambda o: in_messages(thinking=o),
    ),
    "anthropic_OutputFormat": (
        anthropic.MessagesRequest,
        "output_config.format.",
        {"type": "json_schema", "schema": {"type": "object"}},
        lambda o: in_messages(output_config={"format": o}),
    ),
    # OpenAI's Responses
    "responses_TextContent": (
        responses.ResponsesRequest,
        "input[0].content[0].",
        {"type": "input_text", "text": "hi"},
        lambda o: {"input": [{"role": "user", "content": [o]}]},
    ),
    "responses_FunctionTool": (
        responses.ResponsesRequest,
        "tools[0].",
        RESPONSES_TOOL,
        lambda o: {"input": "hi", "tools": [o]},
    ),
    "responses_NamedFunction": (
        responses.ResponsesRequest,
        "tool_choice.",
        {"type": "function", "name": "f"},
        lambda o: {"input": "hi", "tools": [RESPONSES_TOOL], "tool_choice": o},
    ),
    "responses_TextFormat": (
        responses.ResponsesRequest,
        "text.format.",
        {"type": "json_object"},
        lambda o: {"input": "hi", "text": {"format": o}},
    ),
    # Ollama's
    "ollama_ChatBody": (ollama.ChatBody, "", OLLAMA_CHAT, lambda o: o),
    "ollama_GenerateBody": (ollama.GenerateBody, "", {"model": "target"}, lambda o: o),
    "ollama_EmbedBody": (ollama.EmbedBody, "", {"model": "target"}, lambda o: o),
    "ollama_EmbeddingsBody": (ollama.EmbeddingsBody, "", {"model": "target"}, lambda o: o),
    "ollama_MessageBody": (
        ollama.ChatBody,
        "messages[0].",
        HELLO[0],
        lambda o: {**OLLAMA_CHAT, "messages": [o]},
    ),
    "ollama_CallBody": (
        ollama.ChatBody,
        "messages[0].tool_calls[0].",
        {"function": {"name": "f"}},
        lambda o: {**OLLAMA_CHAT, "messages": [{"role": "assistant", "tool_calls": [o]}]},
    ),
    "ollama_FunctionCall": (
        ollama.ChatBody,
        "messages[0].tool_calls[0].function.",
        {"name": "f"},
        lambda o: {
            **OLLAMA_CHAT,
            "messages": [{"role": "assistant", "tool_calls": [{"function": o}]}],
        },
    ),
}


def test_every_field_the_document_requires_anywhere_is_refused_when_missing(client: TestClient):
    """Where a union's alternatives are one error (a message's content), the error names the
    field that holds the object."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    requiring = {
        name: schema["required"] for name, schema in schemas.items() if "required" in schema
    }
    assert requiring.keys() == PLACES.keys()
    for name, required in requiring.items():
        model, prefix, example, place = PLACES[name]
        read(model, place(example))  # sound as it is
        for field in required:
            with pytest.raises(ApiError) as refused:
                read(model, place({k: v for k, v in example.items() if k != field}))
            assert refused.value.status == 400 and refused.value.param
            assert (prefix + field).startswith(refused.value.param), (name, field)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_wrong_type_is_an_openai_400_that_names_the_field(client: TestClient, path: str):
    response = client.post(path, json={**VALID[path], "top_k": "many"})
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": '`top_k` must be a valid integer, got "many"',
            "type": "invalid_request_error",
            "param": "top_k",
            "code": "invalid_type",
        }
    }


@pytest.mark.parametrize(
    "block, param, code",
    [
        ({"type": "text"}, "messages[0].content[0].text", "missing_required_parameter"),
        ({"type": "text", "text": 5}, "messages[0].content[0].text", "invalid_type"),
        (
            {"type": "tool_result"},
            "messages[0].content[0].tool_use_id",
            "missing_required_parameter",
        ),
        (
            {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text"}]},
            "messages[0].content[0].content[0].text",
            "missing_required_parameter",
        ),
    ],
)
def test_a_field_of_a_block_is_named_by_its_path_without_the_blocks_type(
    block: dict[str, Any], param: str, code: str
) -> None:
    """pydantic puts a tagged union's tag (the block's `type`) in the error's location: the
    client's body has no such field."""
    error = refusal(validated, declared=anthropic.MessagesRequest, body=in_messages(block))
    assert (error.param, error.code) == (param, code)
    assert f"`{param}`" in str(error)
