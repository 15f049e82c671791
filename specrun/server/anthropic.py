"""Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`) over the
same engine and slots. A body is read as its own declared schema, then as the chat completion
it asks for (`requests.chat_request` checks the model, the sampling and the tools, as for
OpenAI's chat); the answer's parts (`answers.py`) are rendered as Anthropic's content blocks,
whole or as its streamed events, and errors in its shape with its types and status codes."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from specrun.core.text import Detokenizer, ending_stop
from specrun.errors import SpecrunError
from specrun.reasoning import Effort
from specrun.server import answers
from specrun.server.bodies import (
    FUNCTION_NAME,
    Body,
    ChatCompletionRequest,
    JsonSchema,
    StopList,
    required,
)
from specrun.server.family import Family, Service
from specrun.server.requests import ApiError, GenerationRequest, chat_request, checked, validated
from specrun.server.worker import Job
from specrun.tools import ToolCall

LOG = logging.getLogger("uvicorn.error")
OVERLOADED = 529  # Anthropic's status for a server too busy to take the request
# Anthropic's error `type` of each status; another 4xx is invalid_request_error, a 5xx api_error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    OVERLOADED: "overloaded_error",
}
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
OpenBlock = Literal["text", "thinking"]  # the streamed blocks that grow delta by delta
# Anthropic's efforts as a template's reasoning_effort (gpt-oss's): its highest is high.
EFFORTS: dict[str, Effort] = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}


# --- bodies ---------------------------------------------------------------------------------


def _as_blocks(content: Any) -> Any:
    """A string where blocks may be given: one text block."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


class TextBlock(Body):
    type: Literal["text"]
    text: str


class UnreadBlock(Body):
    """An image or a document: declared, to be refused by name (the models read text)."""

    type: Literal["image", "document"]


class ToolResultBlock(Body):
    """A tool's result, in a user message: the call it answers, and what the tool said."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: list[Annotated[TextBlock | UnreadBlock, Field(discriminator="type")]] = []
    is_error: bool = Field(False, description="the tool failed: its text is told as an error")

    _blocks = field_validator("content", mode="before")(_as_blocks)


class ToolUseBlock(Body):
    """A call the assistant made, sent back with the conversation."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ThinkingBlock(Body):
    """The assistant's earlier thinking, sent back: not part of the next prompt."""

    type: Literal["thinking", "redacted_thinking"]


ContentBlock = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | UnreadBlock,
    Field(discriminator="type"),
]


class InputMessage(Body):
    role: Literal["user", "assistant"]
    content: list[ContentBlock] = Field(description="a string, or a list of content blocks")

    _blocks = field_validator("content", mode="before")(_as_blocks)


class ToolDefinition(Body):
    """A function the model may call (a client tool: the server runs none itself)."""

    type: Literal["custom"] = "custom"
    name: str = Field(pattern=FUNCTION_NAME)
    description: str = ""
    input_schema: dict[str, Any] = Field(description="a JSON schema of the input (an object's)")


class ToolChoice(Body):
    """auto: the model chooses; any: a call of some tool; tool: a call of `name`; none: no
    call."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(None, validate_default=True)
    disable_parallel_tool_use: bool = False

    @field_validator("name")
    @classmethod
    def _named_for_tool(cls, name: str | None, info: ValidationInfo) -> str | None:
        if name is None and info.data.get("type") == "tool":
            raise required()
        return name


class ThinkingConfig(Body):
    """Whether the model thinks before it answers (where its template says how it thinks)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(None, description="accepted; the answer's is max_tokens")


class OutputFormat(Body):
    """Structured output: JSON that keeps to `schema`."""

    type: Literal["json_schema"]
    schema_: JsonSchema = Field(alias="schema")


class OutputConfig(Body):
    format: OutputFormat | None = None
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="how much the model thinks, where its template says how"
    )


class Conversation(Body):
    """What both routes read: the conversation and what the model is offered."""

    model: str
    messages: list[InputMessage] = Field(min_length=1)
    system: list[TextBlock] = Field([], description="a string, or a list of text blocks")
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None

    _blocks = field_validator("system", mode="before")(_as_blocks)


class MessagesRequest(Conversation):
    """A /v1/messages body: the conversation's next message, and how to answer."""

    max_tokens: int = Field(ge=1)
    stop_sequences: StopList | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    metadata: dict[str, Any] | None = Field(None, description="accepted, and ignored")


class CountTokensRequest(Conversation):
    """A /v1/messages/count_tokens body: the conversation whose prompt is counted."""


# The routes' bodies, for the OpenAPI document.
BODIES: dict[str, type[BaseModel]] = {
    "/v1/messages": MessagesRequest,
    "/v1/messages/count_tokens": CountTokensRequest,
}


# --- the chat completion a body asks for ------------------------------------------------------


def _unread(block: UnreadBlock, where: str) -> ApiError:
    return ApiError(
        400,
        f"`{where}` is an {block.type} block, which this server cannot read: its models take "
        "text only",
        param=where,
        code="invalid_value",
    )


def _text(blocks: list[Any], where: str) -> str:
    """Text blocks' text, joined (`where`: their list's field, for the error)."""
    for index, block in enumerate(blocks):
        if isinstance(block, UnreadBlock):
            raise _unread(block, f"{where}[{index}]")
    return "\n".join(block.text for block in blocks)


def _chat_messages(asked: Conversation) -> list[dict[str, Any]]:
    """The conversation as OpenAI's chat messages: the system text first; an assistant's
    tool_use blocks as its calls; each tool_result block as a tool message, in the order the
    blocks come, between the user's texts."""
    chat: list[dict[str, Any]] = []
    if asked.system:
        chat.append({"role": "system", "content": _text(asked.system, "system")})
    for m, message in enumerate(asked.messages):
        where = f"messages[{m}].content"
        if message.role == "assistant":
            said = [block for block in message.content if isinstance(block, TextBlock)]
            calls = [
                {
                    "id": block.id,
                    "function": {"name": block.name, "arguments": json.dumps(block.input)},
                }
                for block in message.content
                if isinstance(block, ToolUseBlock)
            ]
            chat.append({"role": "assistant", "content": _text(said, where), "tool_calls": calls})
            continue
        texts: list[TextBlock] = []
        answered = False  # a tool's result came last
        for b, block in enumerate(message.content):
            if isinstance(block, UnreadBlock):
                raise _unread(block, f"{where}[{b}]")
            if isinstance(block, ToolResultBlock):
                if texts:
                    chat.append({"role": "user", "content": _text(texts, where)})
                    texts = []
                answered = True
                result = _text(block.content, f"{where}[{b}].content")
                chat.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.tool_use_id,
                        "content": f"Error: {result}" if block.is_error else result,
                    }
                )
            elif isinstance(block, TextBlock):
                texts.append(block)
                answered = False
            else:  # a tool_use or thinking block is an assistant's
                raise ApiError(
                    400,
                    f"`{where}[{b}]` is a {block.type} block, which only an assistant's "
                    "message holds",
                    param=f"{where}[{b}]",
                    code="invalid_value",
                )
        if not answered:
            chat.append({"role": "user", "content": _text(texts, where)})
    return chat


def _tool_choice(choice: ToolChoice | None) -> dict[str, Any]:
    if choice is None:
        return {}
    named = {"type": "function", "function": {"name": choice.name}}
    as_chat = {"auto": "auto", "any": "required", "none": "none", "tool": named}[choice.type]
    return {"tool_choice": as_chat, "parallel_tool_calls": not choice.disable_parallel_tool_use}


def _chat_body(asked: Conversation) -> dict[str, Any]:
    """The chat completion body that asks what `asked` asks (its fields left out where not
    given, so the server's own defaults apply)."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.input_schema,
            },
        }
        for tool in asked.tools or ()
    ]
    body: dict[str, Any] = {
        "model": asked.model,
        "messages": _chat_messages(asked),
        **({"tools": tools} if tools else {}),
        **_tool_choice(asked.tool_choice),
    }
    form = asked.output_config.format if asked.output_config else None
    if form is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": form.schema_},
        }
    if isinstance(asked, MessagesRequest):
        body |= {
            "max_tokens": asked.max_tokens,
            "stop": asked.stop_sequences,
            "stream": asked.stream,
            "temperature": asked.temperature,
            "top_p": asked.top_p,
            "top_k": asked.top_k,
        }
    return body


def generation_request(asked: Conversation, server: Service) -> GenerationRequest:
    """The generation `asked` asks for, checked as OpenAI's chat checks its own; thinking
    turned on or off (adaptive: as the template does by default), and its effort."""
    chat = checked(ChatCompletionRequest, _chat_body(asked))
    request = chat_request(chat, server.worker.pool.names, server.worker.defaults)
    thinking, config = asked.thinking, asked.output_config
    return replace(
        request,
        thinking=None
        if thinking is None or thinking.type == "adaptive"
        else thinking.type == "enabled",
        thinking_param="thinking",
        reasoning_effort=EFFORTS[config.effort] if config and config.effort else None,
    )


# --- answers ------------------------------------------------------------------------------------


def _sse(event: str, data: dict[str, object]) -> str:
    """One of Anthropic's server-sent events: its name, and its data, whose type repeats it."""
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n"


def _tool_use(call: ToolCall) -> dict[str, object]:
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": json.loads(call.arguments or "{}"),
    }


def _stop(job: Job, finish: answers.Finish) -> tuple[StopReason, str | None]:
    """Anthropic's stop_reason, and the stop string that ended the answer, where one did."""
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    engine, stops = job.engine, job.request.stop
    matched = (
        ending_stop(Detokenizer(engine.target), stops, job.stats.committed)
        if stops and engine is not None
        else None
    )
    return ("stop_sequence", matched) if matched else ("end_turn", None)


def _usage(job: Job) -> dict[str, int]:
    """Anthropic counts the prompt's tokens read from the cache apart from the rest."""
    stats = job.stats
    return {
        "input_tokens": stats.prompt_evaluated,
        "cache_read_input_tokens": stats.prompt_tokens - stats.prompt_evaluated,
        "output_tokens": stats.generated,
    }


def _message(job: Job, content: list[dict[str, object]]) -> dict[str, object]:
    return {
        "id": job.id,
        "type": "message",
        "role": "assistant",
        "model": job.request.model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
    }


async def _whole(job: Job) -> dict[str, object]:
    answer = await answers.whole(job)
    content: list[dict[str, object]] = []
    if answer.reasoning:  # a local model's thinking is signed by no one
        content.append({"type": "thinking", "thinking": answer.reasoning, "signature": ""})
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    content += [_tool_use(call) for call in answer.calls]
    reason, sequence = _stop(job, answer.finish)
    return {
        **_message(job, content),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": _usage(job),
        "specrun": job.stats.as_dict(),
    }


@dataclass
class _Blocks:
    """The streamed content blocks: the one open, which the next delta of its kind extends."""

    index: int = -1
    open: OpenBlock | None = None

    def delta(self, kind: OpenBlock, text: str) -> Iterator[str]:
        if self.open != kind:
            yield from self.close()
            self.index, self.open = self.index + 1, kind
            empty = {"type": kind, kind: "", **({"signature": ""} if kind == "thinking" else {})}
            yield _sse("content_block_start", {"index": self.index, "content_block": empty})
        delta = {"type": f"{kind}_delta", kind: text}
        yield _sse("content_block_delta", {"index": self.index, "delta": delta})

    def close(self) -> Iterator[str]:
        if self.open == "thinking":  # a thinking block ends with its (empty) signature
            delta = {"type": "signature_delta", "signature": ""}
            yield _sse("content_block_delta", {"index": self.index, "delta": delta})
        if self.open is not None:
            yield _sse("content_block_stop", {"index": self.index})
        self.open = None

    def tool_use(self, call: ToolCall) -> Iterator[str]:
        yield from self.close()
        self.index += 1
        block = {**_tool_use(call), "input": {}}
        yield _sse("content_block_start", {"index": self.index, "content_block": block})
        delta = {"type": "input_json_delta", "partial_json": call.arguments or "{}"}
        yield _sse("content_block_delta", {"index": self.index, "delta": delta})
        yield _sse("content_block_stop", {"index": self.index})


async def _events(job: Job) -> AsyncIterator[str]:
    """Anthropic's events: message_start, each block's start, deltas and stop, message_delta
    with the stop_reason, the usage and specrun's figures, then message_stop; or, once the
    answer has begun, an error event as its last."""
    usage = {**_usage(job), "output_tokens": 0}
    yield _sse("message_start", {"message": {**_message(job, []), "usage": usage}})
    blocks = _Blocks()
    made_calls = False
    try:
        async for part in answers.parts(job):
            if isinstance(part, answers.ReasoningPart):
                for event in blocks.delta("thinking", part.text):
                    yield event
            elif isinstance(part, answers.TextPart):
                for event in blocks.delta("text", part.text) if part.text else ():
                    yield event
            else:
                made_calls = True
                for call in part.calls:
                    for event in blocks.tool_use(call):
                        yield event
        for event in blocks.close():
            yield event
        reason, sequence = _stop(job, answers.finish(job, made_calls))
    except ApiError as error:
        yield _sse("error", {"error": _error(error)})
        return
    except Exception as error:  # a bug in its generation: the stream must still end
        LOG.error("a streamed answer failed", exc_info=error)
        yield _sse("error", {"error": {"type": "api_error", "message": f"internal error: {error}"}})
        return
    delta = {"stop_reason": reason, "stop_sequence": sequence}
    figures = {"usage": _usage(job), "specrun": job.stats.as_dict()}
    yield _sse("message_delta", {"delta": delta, **figures})
    yield _sse("message_stop", {})


# --- routes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Messages:
    """The routes, over the server."""

    server: Service

    async def create(self, request: Request) -> Response:
        """Anthropic's Messages API: a conversation's next message, whole or streamed as
        Anthropic's server-sent events."""
        asked = validated(MessagesRequest, await self.server.body(request))
        # Off the event loop: a tool schema's conversion to a grammar takes up to half a second.
        generation = await asyncio.to_thread(generation_request, asked, self.server)
        try:
            jobs = await self.server.start(request, generation, "msg_")
        except ApiError as error:
            if error.code != "queue_full":
                raise
            raise ApiError(
                OVERLOADED, str(error), kind=error.kind, code=error.code, headers=error.headers
            ) from None
        if generation.stream:
            return StreamingResponse(
                _events(jobs[0]),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return JSONResponse(await _whole(jobs[0]))

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's token count: the tokens of the conversation's prompt, as the model's
        chat template writes it with the tools offered."""
        asked = validated(CountTokensRequest, await self.server.body(request))
        generation = await asyncio.to_thread(generation_request, asked, self.server)
        count = await asyncio.to_thread(self._count, generation)
        return JSONResponse({"input_tokens": count})

    def _count(self, generation: GenerationRequest) -> int:
        pool = self.server.worker.pool
        try:
            engine = pool.acquire(generation.model)  # loads it, where a generation would
        except SpecrunError as error:
            raise ApiError(
                503, f"the model `{generation.model}` could not be loaded: {error}"
            ) from None
        try:
            return len(generation.tokens(engine))
        except SpecrunError as error:  # a template that rejects the conversation
            raise ApiError(400, str(error), param="messages") from None
        finally:
            pool.release(generation.model)


def routes(server: Service) -> list[Route]:
    messages = Messages(server)
    return [
        Route("/v1/messages", messages.create, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
    ]


def _error(error: ApiError) -> dict[str, str]:
    kind = ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else None)
    return {"type": kind or "invalid_request_error", "message": str(error)}


def error_body(error: ApiError) -> dict[str, object]:
    """Anthropic's error shape: {"type": "error", "error": {"type", "message"}}, its `type`
    the one Anthropic gives the status."""
    return {"type": "error", "error": _error(error)}


FAMILY = Family("anthropic", ("/v1/messages",), routes, BODIES, error_body)
