"""OpenAI's Responses API (`POST /v1/responses`) over the same engine and slots.

A body is read as declared here (`ResponsesRequest`), then written as the chat completion it
asks for and read by chat's own checks (`requests.checked`, `requests.chat_request`: the
models, the sampling, the grammars and schemas, the tools), whose errors are renamed to this
body's fields. The answer's parts (`answers.py`) are rendered as a response object, or
streamed as its events. Responses stored (`store`, true unless sent false) are kept per API
key, the last MAX_STORED of each, so that `previous_response_id` can continue one."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from specrun.server import answers
from specrun.server.bodies import (
    FUNCTION_NAME,
    Body,
    ChatCompletionRequest,
    FunctionCall,
    FunctionDefinition,
    JsonSchema,
    one_error,
    required,
)
from specrun.server.family import Family, Service, openai_error, tenant
from specrun.server.requests import ApiError, chat_request, checked, echoed, validated
from specrun.server.worker import Job
from specrun.tools import ToolCall

PATH = "/v1/responses"
MAX_STORED = 256  # stored responses kept per API key: an agent continues its latest ones
LOG = logging.getLogger("uvicorn.error")
TEXT = "a string or a list of input_text parts (this server reads text: no images, no files)"
Status = Literal["completed", "incomplete"]
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
# OpenAI's efforts as chat's `reasoning_effort`: minimal thinks not at all, xhigh as high.
EFFORTS: dict[Effort, Literal["none", "low", "medium", "high"]] = {
    "none": "none",
    "minimal": "none",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
}
ChatMessage = dict[str, Any]  # a message as a chat completion's body holds it
TextKind = Literal["message", "reasoning"]  # the items whose text grows delta by delta
ITEM_PREFIXES: dict[TextKind, str] = {"message": "msg", "reasoning": "rs"}  # of their ids


# --- the body ------------------------------------------------------------------------------


class TextContent(Body):
    """Text in a message: what a user wrote (`input_text`), or an earlier answer
    (`output_text`, as a response's output is sent back)."""

    type: Literal["input_text", "output_text"]
    text: str


Content = Annotated[str | list[TextContent] | None, one_error(TEXT)]
ItemType = Literal["message", "function_call", "function_call_output", "reasoning"]
# The fields each kind of item must have.
NEEDED: dict[str, tuple[ItemType, ...]] = {
    "role": ("message",),
    "content": ("message",),
    "call_id": ("function_call", "function_call_output"),
    "name": ("function_call",),
    "arguments": ("function_call",),
    "output": ("function_call_output",),
}


class InputItem(Body):
    """An item of the conversation: a message, a call the model made (`function_call`), its
    result (`function_call_output`), or the model's earlier thinking (`reasoning`: read and
    left out, as templates leave out earlier turns' thinking)."""

    type: ItemType = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = Field(
        None, validate_default=True
    )
    content: Content = Field(None, validate_default=True)
    call_id: str | None = Field(None, validate_default=True)
    name: str | None = Field(None, validate_default=True)
    arguments: str | None = Field(None, validate_default=True, description="JSON text")
    output: Content = Field(None, validate_default=True)

    @field_validator(*NEEDED)
    @classmethod
    def _given_for_its_type(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.data.get("type") in NEEDED[info.field_name or ""]:
            raise required()
        return value

    @field_validator("arguments")
    @classmethod
    def _json_text(cls, arguments: str | None) -> str | None:
        return arguments if arguments is None else FunctionCall._json_text(arguments)


class FunctionTool(FunctionDefinition):
    """A function the model may call (Responses' tools are flat: no `function` object).
    `strict` is accepted: a required call's arguments always keep to the schema."""

    type: Literal["function"]
    strict: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _a_function(cls, given: Any) -> Any:
        """Before its fields: a hosted tool (web search, files, a computer) is no function."""
        if isinstance(given, dict) and given.get("type") != "function":
            raise PydanticCustomError(
                "invalid_value", "must be a function tool: this server runs no hosted tools"
            )
        return given


class NamedFunction(Body):
    """A call of this function, and no other answer."""

    type: Literal["function"]
    name: str = Field(pattern=FUNCTION_NAME)


class TextFormat(Body):
    """The answer's form: text, any JSON object, or JSON that keeps to `schema` (`strict` is
    accepted: the answer always keeps to it). Chat's `response_format` checks the schema."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: JsonSchema | None = Field(None, alias="schema", description="for json_schema")
    strict: bool | None = None


class TextOptions(Body):
    format: TextFormat | None = None
    verbosity: Annotated[
        Literal["medium"] | None, one_error("medium: the model's own", "invalid_value")
    ] = None


class ReasoningOptions(Body):
    """How hard the model thinks. An effort asks a reasoning model to think (as OpenAI's
    reasoning models do, and Ollama's `think`), where its template has a switch (DeepSeek's
    thinks only when asked); none and minimal, not to."""

    effort: Effort | None = Field(None, description="where the model's template reads it")
    summary: Literal["auto", "concise", "detailed"] | None = None  # thinking comes whole

    @property
    def thinking(self) -> bool | None:
        return None if self.effort is None else EFFORTS[self.effort] != "none"


def _items(given: Any) -> Any:
    """A user's text is the conversation's one item (read so, an item's error names its place)."""
    return [{"role": "user", "content": given}] if isinstance(given, str) else given


def _not_done(what: str) -> Any:
    """A field whose every value but its default asks for something this server does not do."""
    return one_error(f"left out: {what}", "invalid_value")


class ResponsesRequest(Body):
    """A /v1/responses body: a conversation (`input`, after the one `previous_response_id`
    names) to answer."""

    model: str | None = Field(None, description="left out: the server's first model")
    input: Annotated[
        list[InputItem], BeforeValidator(_items, json_schema_input_type=str | list[InputItem])
    ] = Field(default_factory=list, description="a user's text, or the conversation's items")
    instructions: str | None = Field(None, description="the system message, not carried on")
    previous_response_id: str | None = Field(None, description="a stored response to go on from")
    store: bool = Field(True, description="keep this response for `previous_response_id`")
    max_output_tokens: int | None = Field(None, description="left out: until the context is full")
    temperature: float | None = Field(None, description="left out: the server's own")
    top_p: float | None = Field(None, description="left out: the server's own")
    tools: list[FunctionTool] | None = None
    tool_choice: Annotated[
        Literal["none", "auto", "required"] | NamedFunction | None,
        one_error('none, auto, required or {"type": "function", "name": ...}', "invalid_value"),
    ] = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    stream: bool = False
    metadata: dict[str, str] | None = None
    background: Annotated[
        Literal[False], _not_done("this server answers while the client waits")
    ] = False
    conversation: Annotated[None, _not_done("this server keeps no conversations")] = None
    prompt: Annotated[None, _not_done("this server keeps no prompt templates")] = None
    top_logprobs: Annotated[Literal[0] | None, _not_done("log-probabilities are chat's")] = None

    @property
    def format(self) -> TextFormat | None:
        return self.text.format if self.text else None


# The route's body, for the OpenAPI document.
BODIES: dict[str, type[BaseModel]] = {PATH: ResponsesRequest}


# --- the chat completion it asks for ---------------------------------------------------------


def _content(content: str | list[TextContent] | None) -> str | list[dict[str, str]] | None:
    """Content as chat's: text, or its text parts."""
    if isinstance(content, list):
        return [{"type": "text", "text": part.text} for part in content]
    return content


def _messages(items: list[InputItem]) -> list[ChatMessage]:
    """The input as chat messages: each result as a tool's message, and calls in a row as one
    assistant message's (with the text before them)."""
    messages: list[ChatMessage] = []
    for item in items:
        if item.type == "message":
            messages.append({"role": item.role, "content": _content(item.content)})
        elif item.type == "function_call":
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            last = messages[-1] if messages else {}
            if last.get("role") == "assistant":
                messages[-1] = {**last, "tool_calls": [*last.get("tool_calls", ()), call]}
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.type == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.call_id, "content": _content(item.output)}
            )
    return messages


def _chat_body(asked: ResponsesRequest, messages: list[ChatMessage]) -> dict[str, Any]:
    """The chat completion's body that asks what `asked` asks, over `messages`."""
    form = asked.format
    response_format: dict[str, Any] | None = None
    if form is not None and form.type == "json_schema":
        schema = {"name": form.name, "schema": form.schema_}
        response_format = {"type": "json_schema", "json_schema": schema}
    elif form is not None:
        response_format = {"type": form.type}
    choice = asked.tool_choice
    return {
        "model": asked.model,
        "messages": messages,
        "max_tokens": asked.max_output_tokens,
        "temperature": asked.temperature,
        "top_p": asked.top_p,
        "stream": asked.stream,
        "response_format": response_format,
        "tools": [
            {"type": "function", "function": tool.model_dump(exclude={"type", "strict"})}
            for tool in asked.tools or ()
        ]
        or None,
        "tool_choice": (
            {"type": "function", "function": {"name": choice.name}}
            if isinstance(choice, NamedFunction)
            else choice
        ),
        "parallel_tool_calls": asked.parallel_tool_calls,
        "reasoning_effort": EFFORTS[asked.reasoning.effort]
        if asked.reasoning and asked.reasoning.effort
        else None,
    }


# Chat's names of fields (a `param`, or a name in backquotes) as this body names them.
CHAT_NAMES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^messages(\[\d+\].*)?$"), "input"),
    (re.compile(r"^max_tokens$"), "max_output_tokens"),
    (re.compile(r"^response_format\.json_schema\.schema\b"), "text.format.schema"),
    (re.compile(r"^response_format(\.json_schema)?\b"), "text.format"),
    (re.compile(r"^reasoning_effort$"), "reasoning.effort"),
    (re.compile(r"^(tools\[\d+\])\.function\b"), r"\1"),
)


def _ours(name: str) -> str:
    for pattern, renamed in CHAT_NAMES:
        if pattern.search(name):
            return pattern.sub(renamed, name, count=1)
    return name


def _renamed(error: ApiError) -> ApiError:
    """Chat's error, naming the fields by this body's names."""
    message = re.sub(r"`([^`]+)`", lambda named: f"`{_ours(named.group(1))}`", str(error))
    return ApiError(
        error.status,
        message,
        param=error.param and _ours(error.param),
        code=error.code,
        kind=error.kind,
        headers=error.headers,
    )


# --- stored responses --------------------------------------------------------------------------


@dataclass
class Stored:
    """Each tenant's stored responses, as the conversations they end (without their
    instructions, which a next response does not carry on), the last `limit` of each."""

    limit: int = MAX_STORED
    kept: dict[str | None, OrderedDict[str, tuple[ChatMessage, ...]]] = field(default_factory=dict)

    def keep(self, tenant: str | None, response_id: str, messages: list[ChatMessage]) -> None:
        mine = self.kept.setdefault(tenant, OrderedDict())
        mine[response_id] = tuple(messages)  # the messages are shared with the one before
        while len(mine) > self.limit:
            mine.popitem(last=False)

    def conversation(self, tenant: str | None, response_id: str) -> list[ChatMessage]:
        """The conversation `response_id` ended: only the tenant's own responses are found."""
        mine = self.kept.get(tenant, OrderedDict())
        if response_id not in mine:
            raise ApiError(
                400,
                f"Previous response with id '{echoed(response_id)}' not found: this server "
                f"keeps the last {self.limit} stored responses of each API key, until it stops",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        mine.move_to_end(response_id)
        return list(mine[response_id])


# --- the response -------------------------------------------------------------------------------


@dataclass
class Output:
    """A response's output items as the answer's parts come, and its conversation so far."""

    job: Job
    items: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    calls: tuple[ToolCall, ...] = ()

    def item_id(self, kind: str) -> str:
        return f"{kind}_{self.job.id.removeprefix('resp_')}_{len(self.items)}"

    def reply(self) -> ChatMessage:
        """The answer as the conversation's next message."""
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in self.calls
        ]
        return {"role": "assistant", "content": self.text, "tool_calls": calls or None}


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    content = [_reasoning_part(text)] if text else []
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content}


def _reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _call_item(item_id: str, call: ToolCall, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }


def _record(
    asked: ResponsesRequest, job: Job, status: str, output: Output | None = None
) -> dict[str, Any]:
    """The response object: what it says of its request, and its output once it has one."""
    params = job.request.params
    record = {
        "id": job.id,
        "object": "response",
        "created_at": job.created,
        "status": status,
        "error": None,
        "incomplete_details": ({"reason": "max_output_tokens"} if status == "incomplete" else None),
        "instructions": asked.instructions,
        "max_output_tokens": asked.max_output_tokens,
        "model": job.request.model,
        "output": output.items if output is not None else [],
        "parallel_tool_calls": job.request.parallel_tool_calls,
        "previous_response_id": asked.previous_response_id,
        "reasoning": {"effort": asked.reasoning.effort if asked.reasoning else None},
        "store": asked.store,
        "temperature": params.temperature,
        "text": {"format": asked.format.model_dump(by_alias=True, exclude_none=True)}
        if asked.format
        else {"format": {"type": "text"}},
        "tool_choice": (
            asked.tool_choice.model_dump()
            if isinstance(asked.tool_choice, NamedFunction)
            else asked.tool_choice or "auto"
        ),
        "tools": [tool.model_dump() for tool in asked.tools or ()],
        "top_p": params.top_p,
        "truncation": "disabled",
        "metadata": asked.metadata or {},
        "usage": None,
    }
    if output is not None:
        stats = job.stats
        record["output_text"] = output.text
        record["usage"] = {
            "input_tokens": stats.prompt_tokens,
            "input_tokens_details": {"cached_tokens": stats.prompt_tokens - stats.prompt_evaluated},
            "output_tokens": stats.generated,
            "total_tokens": stats.prompt_tokens + stats.generated,
        }
        record["specrun"] = stats.as_dict()
    return record


def _status(job: Job, made_calls: bool) -> Status:
    return "incomplete" if answers.finish(job, made_calls) == "length" else "completed"


async def _whole(job: Job) -> tuple[Status, Output]:
    """The answer read to its end, as a response's output items."""
    answer = await answers.whole(job)
    status = _status(job, bool(answer.calls))
    output = Output(job, text=answer.text, calls=answer.calls)
    if answer.reasoning:
        item_id = output.item_id(ITEM_PREFIXES["reasoning"])
        output.items.append(_reasoning_item(item_id, answer.reasoning))
    if answer.text:
        item_id = output.item_id(ITEM_PREFIXES["message"])
        output.items.append(_message_item(item_id, answer.text, status))
    for call in answer.calls:
        output.items.append(_call_item(output.item_id("fc"), call, call.arguments, "completed"))
    return status, output


# --- streamed ----------------------------------------------------------------------------------


@dataclass
class Open:
    """The output item the stream is adding text to."""

    kind: TextKind
    index: int
    item_id: str
    text: str = ""

    @property
    def where(self) -> dict[str, object]:
        return {"item_id": self.item_id, "output_index": self.index, "content_index": 0}


@dataclass
class Events:
    """A response's events as its answer's parts come, each with its sequence number: an item
    added, its text in deltas, done; `status` is the message's once the answer has ended."""

    output: Output
    sequence: Iterator[int] = field(default_factory=count)
    opened: Open | None = None
    status: Status = "completed"

    def event(self, kind: str, **fields: object) -> str:
        record = {"type": kind, "sequence_number": next(self.sequence), **fields}
        return f"event: {kind}\ndata: {json.dumps(record)}\n\n"

    def writing(self, kind: TextKind) -> bool:
        return self.opened is not None and self.opened.kind == kind

    def text(self, kind: TextKind, text: str) -> Iterator[str]:
        """Text of the message, or of the reasoning: the item opened where it is not."""
        if not self.writing(kind):
            yield from self.close()
            yield from self.open(kind)
        assert self.opened is not None
        self.opened.text += text
        if kind == "reasoning":
            yield self.event("response.reasoning_text.delta", **self.opened.where, delta=text)
        else:
            delta = {"delta": text, "logprobs": []}
            yield self.event("response.output_text.delta", **self.opened.where, **delta)

    def open(self, kind: TextKind) -> Iterator[str]:
        items = self.output.items
        self.opened = Open(kind, len(items), self.output.item_id(ITEM_PREFIXES[kind]))
        if kind == "reasoning":
            item, part = _reasoning_item(self.opened.item_id, ""), _reasoning_part("")
        else:
            item, part = _message_item(self.opened.item_id, None, "in_progress"), _text_part("")
        items.append(item)
        yield self.event("response.output_item.added", output_index=self.opened.index, item=item)
        yield self.event("response.content_part.added", **self.opened.where, part=part)

    def close(self) -> Iterator[str]:
        opened = self.opened
        if opened is None:
            return
        if opened.kind == "reasoning":
            item, part = _reasoning_item(opened.item_id, opened.text), _reasoning_part(opened.text)
            yield self.event("response.reasoning_text.done", **opened.where, text=opened.text)
        else:
            item = _message_item(opened.item_id, opened.text, self.status)
            part = _text_part(opened.text)
            done = {"text": opened.text, "logprobs": []}
            yield self.event("response.output_text.done", **opened.where, **done)
        self.output.items[opened.index] = item
        yield self.event("response.content_part.done", **opened.where, part=part)
        yield self.event("response.output_item.done", output_index=opened.index, item=item)
        self.opened = None

    def call(self, call: ToolCall) -> Iterator[str]:
        """A call: its item added, its arguments in one delta, done."""
        index, item_id = len(self.output.items), self.output.item_id("fc")
        where = {"item_id": item_id, "output_index": index}
        item = _call_item(item_id, call, "", "in_progress")
        self.output.items.append(item)
        yield self.event("response.output_item.added", output_index=index, item=item)
        yield self.event("response.function_call_arguments.delta", **where, delta=call.arguments)
        done = {"arguments": call.arguments}
        yield self.event("response.function_call_arguments.done", **where, **done)
        item = self.output.items[index] = _call_item(item_id, call, call.arguments, "completed")
        yield self.event("response.output_item.done", output_index=index, item=item)


async def _events(
    job: Job, asked: ResponsesRequest, events: Events, keep: Callable[[Output], None]
) -> AsyncIterator[str]:
    """The response's events: created, in progress, each output item as it comes, then
    completed or incomplete with the whole response, once `keep` has it. Text that is only
    spaces waits for words: before a call, it is no message (a whole answer's is stripped)."""
    in_progress = _record(asked, job, "in_progress")
    yield events.event("response.created", response=in_progress)
    yield events.event("response.in_progress", response=in_progress)
    output = events.output
    blank = ""
    async for part in answers.parts(job):
        if isinstance(part, answers.CallsPart):
            output.calls = part.calls
        elif isinstance(part, answers.ReasoningPart):
            for line in events.text("reasoning", part.text):
                yield line
        else:
            said, blank = blank + part.text, ""
            if not said.strip() and not events.writing("message"):
                blank = said
                continue
            output.text += said
            for line in events.text("message", said):
                yield line
    events.status = _status(job, bool(output.calls))
    if blank and not output.calls:  # an answer of spaces is still an answer
        output.text += blank
        for line in events.text("message", blank):
            yield line
    for line in events.close():
        yield line
    if output.calls:
        output.text = output.text.strip()
    for call in output.calls:
        for line in events.call(call):
            yield line
    keep(output)
    finished = _record(asked, job, events.status, output)
    yield events.event(f"response.{events.status}", response=finished)


# --- the route ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Responses:
    """The route, over the server, and the responses it stored."""

    server: Service
    stored: Stored = field(default_factory=Stored)

    async def create(self, request: Request) -> Response:
        """A conversation's next response, whole or streamed as its events (OpenAI's
        Responses API); `previous_response_id` goes on from one stored by the same API key."""
        asked = validated(ResponsesRequest, await self.server.body(request))
        before = (
            self.stored.conversation(tenant(request), asked.previous_response_id)
            if asked.previous_response_id is not None
            else []
        )
        conversation = before + _messages(asked.input)
        system = [{"role": "system", "content": asked.instructions}] if asked.instructions else []
        worker = self.server.worker
        try:
            chat = checked(ChatCompletionRequest, _chat_body(asked, system + conversation))
            # Off the event loop: a schema's conversion to a grammar takes up to half a second.
            generation = await asyncio.to_thread(
                chat_request, chat, worker.pool.names, worker.defaults
            )
            if asked.reasoning is not None and asked.reasoning.thinking is not None:
                generation = replace(generation, thinking=asked.reasoning.thinking)
            (job,) = await self.server.start(request, generation, "resp_")
        except ApiError as error:
            raise _renamed(error) from None

        def keep(output: Output) -> None:
            if asked.store:
                self.stored.keep(job.tenant, job.id, [*conversation, output.reply()])

        if not asked.stream:
            status, output = await _whole(job)
            keep(output)
            return JSONResponse(_record(asked, job, status, output))
        return StreamingResponse(
            self._stream(job, asked, keep),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    async def _stream(
        self, job: Job, asked: ResponsesRequest, keep: Callable[[Output], None]
    ) -> AsyncIterator[str]:
        events = Events(Output(job))
        try:
            async for line in _events(job, asked, events, keep):
                yield line
        except ApiError as error:  # the answer had begun: the stream's last word
            yield _error_event(events, _renamed(error))
        except Exception as error:  # a bug in its rendering: the stream must still end
            LOG.error("a streamed response failed", exc_info=error)
            bug = ApiError(500, f"internal error: {type(error).__name__}", kind="server_error")
            yield _error_event(events, bug)


def _error_event(events: Events, error: ApiError) -> str:
    """OpenAI's error event: the stream's last."""
    return events.event("error", code=error.code, message=str(error), param=error.param)


def routes(server: Service) -> list[Route]:
    return [Route(PATH, Responses(server).create, methods=["POST"])]


FAMILY = Family("responses", (PATH,), routes, BODIES, openai_error)
