"""Ollama's API (`/api/chat`, `/api/generate`, `/api/embed`, `/api/tags`, `/api/show`,
`/api/ps`, `/api/version`, and `GET /`'s "Ollama is running") over the same engine, slots and
embedding models as OpenAI's. A request is read as its declared
body here, becomes the OpenAI body it means (checked by requests.py as that one is: models,
sampling, constraints, tools), and is answered from its job's parts as Ollama writes them:
NDJSON objects as they come (Ollama streams unless told not to) or one object, durations in
nanoseconds, specrun's figures in the last object's `specrun`. Models are the command line's:
the routes that would pull, create, copy, push or delete them say which command does."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from specrun import __version__
from specrun.core.sampling import SamplingParams
from specrun.engine import Engine
from specrun.llama.gguf import file_type_name, tensors_and_metadata
from specrun.llama.model import DEFAULT_CTX
from specrun.server import answers, embeddings
from specrun.server.bodies import (
    Body,
    ChatCompletionRequest,
    CompletionRequest,
    Role,
    StopList,
    ToolDefinition,
    one_error,
)
from specrun.server.family import Family, Service
from specrun.server.pool import ModelPool, Served
from specrun.server.requests import (
    FIELDS_OF_OPTIONS,
    ApiError,
    GenerationRequest,
    chat_request,
    checked,
    completion_request,
    echoed,
    validated,
)
from specrun.server.worker import Job
from specrun.tools import ToolCall, tool_format

LOG = logging.getLogger("uvicorn.error")
NDJSON = "application/x-ndjson"
LATEST = ":latest"  # the tag Ollama gives a name that has none
# The Ollama release whose API these routes follow (`think`, tools, `format` schemas): clients
# that enable features by the server's version see one that has them. specrun's is beside it.
OLLAMA_VERSION = "0.9.0"
RANDOM_SEED = -1  # Ollama's (and llama.cpp's) seed for a random one
SMALL_ARRAY = 5  # longer metadata arrays are shown empty unless `verbose`, as Ollama shows them
# The sampling options Ollama and OpenAI's body (llama-server's fields) name alike.
SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
)
# Samplers Ollama has and specrun does not, each with the value that turns it off: set to
# anything else, refused by name (an answer sampled without it would answer another question).
SAMPLERS_NOT_DONE = {"typical_p": 1.0, "tfs_z": 1.0, "mirostat": 0}
# Each field of the OpenAI body a request becomes, by the Ollama field it came from: the name
# an error about it gives.
OLLAMA_FIELDS = {
    **{name: f"options.{name}" for name in (*SAMPLING, "seed")},
    "max_tokens": "options.num_predict",
    "stop": "options.stop",
    "json_schema": "format",
    "response_format": "format",
}
# The older /api/embeddings' field by the name /api/embed (and so `embed`) gives it.
EMBEDDINGS_FIELDS = {"input": "prompt"}
RUNNING = "Ollama is running"  # what Ollama answers at `/`, where clients look for it
# Ollama's routes that manage models: specrun's commands do that.
MANAGEMENT = (
    ("/api/pull", "POST"),
    ("/api/push", "POST"),
    ("/api/create", "POST"),
    ("/api/copy", "POST"),
    ("/api/delete", "DELETE"),
    ("/api/blobs/{digest}", "POST"),
)


# --- bodies ---------------------------------------------------------------------------------


class Options(Body):
    """The `options` specrun acts on, and the samplers it refuses (SAMPLERS_NOT_DONE). The
    load-time ones (num_gpu, num_thread, use_mmap, ...) are the server's command line's and
    change nothing in an answer: ignored, as any option Ollama does not know."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = Field(default=None, description="-1: a random one")
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    num_predict: int | None = Field(
        default=None, ge=-2, description="-1, -2: until the context is full"
    )
    stop: StopList | None = None
    num_ctx: int | None = Field(default=None, ge=1, description="at most the model's context")
    typical_p: float | None = None
    tfs_z: float | None = None
    mirostat: int | None = None


class FunctionCall(Body):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class CallBody(Body):
    """A call an assistant made, sent back with the conversation: its arguments an object."""

    id: str = ""
    function: FunctionCall


class MessageBody(Body):
    """A message of the conversation; a tool's result names the tool (`tool_name`)."""

    role: Role
    content: str = ""
    images: list[str] | None = None
    thinking: str | None = None  # an earlier answer's: not in the prompt, as in chat completions
    tool_calls: list[CallBody] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class Asked(Body):
    """What /api/chat and /api/generate both take."""

    model: str = Field(min_length=1)
    stream: bool = True
    format: Annotated[
        Literal["", "json"] | dict[str, Any] | None,
        one_error('"json" or a JSON schema (an object)', "invalid_value"),
    ] = None
    options: Options = Options()
    # How long the model stays loaded: the server's --keep-alive decides; nothing in the answer.
    keep_alive: float | str | None = None
    think: bool | Literal["high", "medium", "low"] | None = None
    logprobs: bool = False


class ChatBody(Asked):
    """An /api/chat body: a conversation to answer (none: a model to load)."""

    messages: list[MessageBody] = Field(default_factory=list)
    tools: list[ToolDefinition] | None = None

    @property
    def asks_nothing(self) -> bool:
        return not self.messages


class GenerateBody(Asked):
    """An /api/generate body: a prompt, sent as the user's message (`raw`: as is)."""

    prompt: str = ""
    system: str = ""
    suffix: str = ""
    template: str = ""
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None

    @property
    def asks_nothing(self) -> bool:
        return not (self.prompt or self.suffix)


Asking = TypeVar("Asking", "ChatBody", "GenerateBody")


class EmbedBody(Body):
    """An /api/embed body: texts to embed (none: a model to load). An input longer than the
    model's context is refused, as Ollama refuses it under `truncate: false`: cutting it would
    embed another text."""

    model: str = Field(min_length=1)
    input: Annotated[str | list[str], one_error("a string or a list of strings")] = ""
    truncate: bool = True
    dimensions: int | None = Field(None, description="the model's own: its vectors' size")
    keep_alive: float | str | None = None


class EmbeddingsBody(Body):
    """An /api/embeddings body (Ollama's older route): one text to embed."""

    model: str = Field(min_length=1)
    prompt: str = ""
    keep_alive: float | str | None = None


class ShowBody(Body):
    model: str = ""
    name: str = ""  # the field's older name
    verbose: bool = False


# --- names ----------------------------------------------------------------------------------


def _model_id(named: str, pool: ModelPool) -> str:
    """The id of the model an Ollama name means: a name the server gives it, in any case, with
    or without Ollama's default tag (clients write `model:latest`); else Ollama's 404."""
    known = {name.lower(): model_id for name, model_id in pool.names.items()}
    asked = named.lower()
    found = known.get(asked) or known.get(asked.removesuffix(LATEST))
    if found is None:
        raise ApiError(404, f"model '{echoed(named)}' not found", code="model_not_found")
    return found


def _model(named: str, pool: ModelPool) -> Served[Engine]:
    """The generation model an Ollama name means (an embedding model's name: a 400)."""
    model_id = _model_id(named, pool)
    embeddings.check_generates(pool, model_id)
    return pool.served[model_id]


# --- into a GenerationRequest ---------------------------------------------------------------


def _openai_fields(asked: Asked, model_id: str) -> dict[str, Any]:
    """The OpenAI body's fields that Ollama's options and format mean."""
    options = asked.options
    for name, off in SAMPLERS_NOT_DONE.items():
        if getattr(options, name) not in (None, off):
            raise ApiError(
                400,
                f"`options.{name}` asks for a sampler specrun does not have; leave it out, or "
                f"set it to {off}",
                code="unsupported_parameter",
            )
    if asked.logprobs:
        raise ApiError(
            400,
            "`logprobs` is not served by this API yet: /v1/chat/completions has them",
            code="unsupported_parameter",
        )
    predict = options.num_predict
    fields: dict[str, Any] = {
        "model": model_id,
        "stream": asked.stream,
        **{name: getattr(options, name) for name in SAMPLING},
        "seed": None if options.seed == RANDOM_SEED else options.seed,
        "max_tokens": None if predict is None or predict < 0 else predict,
        "stop": options.stop,
    }
    if asked.format == "json":
        fields["response_format"] = {"type": "json_object"}
    elif isinstance(asked.format, dict):
        fields["json_schema"] = asked.format
    return fields


def _in_ollama_terms(error: ApiError, fields: Mapping[str, str] = OLLAMA_FIELDS) -> ApiError:
    """requests.py's error about a field of the OpenAI body, naming the Ollama field instead."""
    field_name = fields.get(error.param or "")
    if field_name is None:
        return error
    return ApiError(
        error.status,
        str(error).replace(f"`{error.param}`", f"`{field_name}`"),
        param=field_name,
        code=error.code,
        kind=error.kind,
        headers=error.headers,
    )


def _openai_message(index: int, message: MessageBody) -> dict[str, Any]:
    """An Ollama message as OpenAI's: calls' arguments as JSON text, a tool's result by the
    call it answers (Ollama names the tool)."""
    if message.images:
        raise ApiError(
            400,
            f"`messages[{index}].images`: specrun serves text models, which cannot read images",
            code="invalid_value",
        )
    return {
        "role": message.role,
        "content": message.content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.function.name,
                    "arguments": json.dumps(call.function.arguments),
                },
            }
            for call in message.tool_calls or ()
        ]
        or None,
        "tool_call_id": message.tool_call_id or message.tool_name or ""
        if message.role == "tool"
        else None,
    }


def _thinking(asked: Asked, generation: GenerationRequest) -> GenerationRequest:
    """`think` as the template's thinking toggle (a level: its reasoning effort too, which
    gpt-oss's template reads); the model's template refuses it where it does not think."""
    think = asked.think
    if think is None:
        return generation
    return replace(
        generation,
        thinking=bool(think),
        thinking_param="think",
        reasoning_effort=think if isinstance(think, str) else None,
    )


def chat_generation(
    asked: ChatBody, model_id: str, names: Mapping[str, str], defaults: SamplingParams
) -> GenerationRequest:
    """An /api/chat body's generation, checked as /v1/chat/completions checks its own."""
    messages = [_openai_message(i, message) for i, message in enumerate(asked.messages)]
    tools = [tool.model_dump(exclude_none=True) for tool in asked.tools or ()]
    body = {**_openai_fields(asked, model_id), "messages": messages, "tools": tools or None}
    try:
        generation = chat_request(checked(ChatCompletionRequest, body), names, defaults)
    except ApiError as error:
        raise _in_ollama_terms(error) from None
    return _thinking(asked, generation)


def generate_generation(
    asked: GenerateBody, model_id: str, names: Mapping[str, str], defaults: SamplingParams
) -> GenerationRequest:
    """An /api/generate body's generation: its prompt as the user's message after its system
    one, or (`raw`) sent as is, as /v1/completions sends its prompt; with a `suffix`, the text
    between the two, as /v1/completions fills it in (400 naming `suffix` for a model without
    fill-in-the-middle tokens)."""
    if asked.images:
        raise ApiError(
            400,
            "`images`: specrun serves text models, which cannot read images",
            code="invalid_value",
        )
    if asked.template:  # Ollama's are Go templates; specrun renders the GGUF's Jinja one
        raise ApiError(
            400,
            "`template`: specrun renders prompts with the model's own chat template; leave it "
            "out, or send the prompt as written with `raw`",
            code="unsupported_parameter",
        )
    if asked.context:
        raise ApiError(
            400,
            "`context` (deprecated in Ollama) is not served: send the conversation to /api/chat",
            code="unsupported_parameter",
        )
    if asked.raw and asked.system:
        raise ApiError(400, "raw mode does not support template, system, or context")
    bare = "`raw`" if asked.raw else "`suffix`" if asked.suffix else None
    if bare and asked.think is not None:  # the template's toggle: these prompts are not its
        raise ApiError(400, f"`think` is the chat template's: a {bare} prompt is sent without it")
    if asked.suffix and asked.system:
        raise ApiError(400, "`system` is the chat template's: a `suffix` prompt is sent without it")
    fields = _openai_fields(asked, model_id)
    try:
        if bare:
            text = {"prompt": asked.prompt, "suffix": asked.suffix}
            return completion_request(
                checked(CompletionRequest, {**fields, **text}), names, defaults
            )
        system = [{"role": "system", "content": asked.system}] if asked.system else []
        messages = [*system, {"role": "user", "content": asked.prompt}]
        generation = chat_request(
            checked(ChatCompletionRequest, {**fields, "messages": messages}), names, defaults
        )
    except ApiError as error:
        raise _in_ollama_terms(error) from None
    return _thinking(asked, generation)


# --- what a model's file says ---------------------------------------------------------------


@dataclass(frozen=True)
class ModelFacts:
    """What a served model's GGUF says of it, as Ollama's model lists show it: read from its
    header (never its tensors' data), once per version of the file."""

    size: int
    modified_at: str
    digest: str | None  # the file's SHA-256, where its name is it (the Hugging Face cache's)
    metadata: Mapping[str, Any]
    parameter_count: int

    @property
    def family(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template")

    @property
    def trained_context(self) -> int | None:
        return self.metadata.get(f"{self.family}.context_length")

    def details(self) -> dict[str, object]:
        file_type = self.metadata.get("general.file_type")
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.family,
            "families": [self.family],
            "parameter_size": _human(self.parameter_count),
            "quantization_level": "" if file_type is None else file_type_name(file_type),
        }

    def model_info(self, verbose: bool) -> dict[str, Any]:
        """The metadata as Ollama's `model_info`: without the name and the template (which has
        a field of its own), long arrays empty unless `verbose` (the tokenizer's are not read)."""
        info: dict[str, Any] = {}
        for key, value in self.metadata.items():
            if key in ("general.name", "tokenizer.chat_template"):
                continue
            if value is None or isinstance(value, tuple):  # an array
                items = list(value or ())
                value = items if verbose or len(items) <= SMALL_ARRAY else []
            info[key] = value
        info.setdefault("general.parameter_count", self.parameter_count)
        return info


def model_facts(path: Path) -> ModelFacts:
    status = path.stat()
    return _facts(path, status.st_mtime_ns, status.st_size)


@lru_cache(maxsize=64)
def _facts(path: Path, mtime_ns: int, size: int) -> ModelFacts:
    """Keyed by the file's identity: a file replaced in place is read again."""
    tensors, metadata = tensors_and_metadata(path)
    blob = Path(os.path.realpath(path)).name
    return ModelFacts(
        size=size,
        modified_at=datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc).isoformat(),
        digest=blob if re.fullmatch(r"[0-9a-f]{64}", blob) else None,
        metadata=metadata,
        parameter_count=sum(math.prod(shape) for _, _, shape in tensors),
    )


def _human(count: int) -> str:
    """A parameter count as Ollama writes one: 8.0B, 134.52M."""
    for scale, unit, digits in ((1e9, "B", 1), (1e6, "M", 2), (1e3, "K", 2)):
        if count >= scale:
            return f"{count / scale:.{digits}f}{unit}"
    return str(count)


def _file(model: Served[Any]) -> Path:
    if model.files:
        return model.files[0]
    assert model.engine is not None, "a model served without its files is loaded (ModelPool.of)"
    return Path(model.engine.target.path)


def _context(model: Served[Engine]) -> int:
    """The model's context in tokens: its engine's, else what loading it gives (its --ctx, no
    more than it was trained for)."""
    if model.engine is not None:
        return model.engine.target.n_ctx
    asked = model.options.n_ctx or DEFAULT_CTX
    trained = model_facts(_file(model)).trained_context
    return min(asked, trained) if trained else asked


def _check_context(asked: Asked, model: Served[Engine]) -> None:
    """Refuse a larger context than it loads with (set by
    `serve --ctx` for every slot at once, a request cannot change it under the generations
    beside it; a window up to it holds the same answer)."""
    wanted = asked.options.num_ctx
    if wanted is not None and wanted > (context := _context(model)):
        raise ApiError(
            400,
            f"`options.num_ctx` is {wanted}, but the context of `{model.id}` is {context} "
            f"tokens (set by `specrun serve --ctx`); send at most {context}, or leave it out",
            code="invalid_value",
        )


# --- answers --------------------------------------------------------------------------------

# Where an endpoint puts an answer's text, thinking and calls.
Fields = Callable[[str, str, tuple[ToolCall, ...]], dict[str, object]]


def _chat_fields(text: str, thinking: str, calls: tuple[ToolCall, ...]) -> dict[str, object]:
    message: dict[str, object] = {"role": "assistant", "content": text}
    if thinking:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "function": {"name": c.name, "arguments": json.loads(c.arguments or "{}")}}
            for c in calls
        ]
    return {"message": message}


def _generate_fields(text: str, thinking: str, calls: tuple[ToolCall, ...]) -> dict[str, object]:
    return {"response": text, **({"thinking": thinking} if thinking else {})}


@dataclass
class Clock:
    """A request's times, for Ollama's durations: its start, and when its prompt was in."""

    started: float = field(default_factory=time.perf_counter)
    prefilled: float = 0.0


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _head(named: str) -> dict[str, object]:
    return {"model": named, "created_at": _now()}


def _end(job: Job, finish: answers.Finish, clock: Clock) -> dict[str, object]:
    """The last object's fields: how the answer ended, Ollama's counts and durations (its
    load_duration is all the time before the prompt's evaluation: the wait for a slot and the
    model's load), and specrun's figures."""
    stats = job.stats
    before_prompt = clock.prefilled - clock.started - stats.prompt_seconds
    return {
        "done": True,
        "done_reason": "length" if finish == "length" else "stop",
        "total_duration": _ns(time.perf_counter() - clock.started),
        "load_duration": _ns(max(0.0, before_prompt)),
        "prompt_eval_count": stats.prompt_tokens,
        "prompt_eval_duration": _ns(stats.prompt_seconds),
        "eval_count": stats.generated,
        "eval_duration": _ns(stats.decode_seconds),
        "specrun": stats.as_dict(),
    }


def _line(record: Mapping[str, object]) -> str:
    return json.dumps(record) + "\n"


async def _lines(job: Job, named: str, fields: Fields, clock: Clock) -> AsyncIterator[str]:
    """The answer as NDJSON objects as its parts come (what may be a call held until it ends),
    then the last one with the figures; an error after the first is the stream's last line."""
    try:
        made_calls = False
        async for part in answers.parts(job):
            if isinstance(part, answers.CallsPart):
                made_calls = True
                record = fields("", "", part.calls)
            elif isinstance(part, answers.ReasoningPart):
                record = fields("", part.text, ())
            elif part.text:
                record = fields(part.text, "", ())
            else:
                continue
            yield _line({**_head(named), **record, "done": False})
        finish = answers.finish(job, made_calls)
        yield _line({**_head(named), **fields("", "", ()), **_end(job, finish, clock)})
    except ApiError as error:
        yield _line(error_body(_in_ollama_terms(error)))
    except Exception as error:  # a bug in its generation: the stream must still end
        LOG.error("a streamed answer failed", exc_info=error)
        yield _line({"error": f"internal error: {type(error).__name__}"})


# --- routes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OllamaApi:
    server: Service

    async def chat(self, request: Request) -> Response:
        """Ollama's chat: a conversation's next message, streamed as NDJSON objects unless
        `stream` is false."""
        return await self._generation(request, ChatBody, chat_generation, _chat_fields)

    async def generate(self, request: Request) -> Response:
        """Ollama's generate: text answering a prompt (or, with a `suffix`, filling in between
        the two), streamed as NDJSON objects unless `stream` is false."""
        return await self._generation(request, GenerateBody, generate_generation, _generate_fields)

    async def _generation(
        self,
        request: Request,
        declared: type[Asking],
        generation_of: Callable[
            [Asking, str, Mapping[str, str], SamplingParams], GenerationRequest
        ],
        fields: Fields,
    ) -> Response:
        clock = Clock()
        asked = validated(declared, await self.server.body(request))
        worker = self.server.worker
        model = _model(asked.model, worker.pool)
        await asyncio.to_thread(_check_context, asked, model)  # may read the file's header
        if asked.asks_nothing:
            return _loaded(asked, fields)
        generation = await asyncio.to_thread(
            generation_of, asked, model.id, worker.pool.names, worker.defaults
        )
        return await self._answer(request, asked, generation, fields, clock)

    async def embed(self, request: Request) -> Response:
        """Ollama's embed: each input's vector, at unit length, by an embedding model
        (`specrun serve --embedding-model`)."""
        clock = Clock()
        asked = validated(EmbedBody, await self.server.body(request))
        pool = self.server.worker.pool
        model_id = _model_id(asked.model, pool)
        listed = isinstance(asked.input, list)
        if isinstance(asked.input, list):
            inputs = asked.input
        else:
            inputs = [asked.input] if asked.input else []
        if not inputs:  # Ollama's load: here the model loads at its first request
            return JSONResponse({"model": asked.model, "embeddings": []})
        embedded = await embeddings.embed(pool, model_id, inputs, asked.dimensions, listed=listed)
        return JSONResponse(
            {
                "model": asked.model,
                "embeddings": embedded.vectors.tolist(),
                "total_duration": _ns(time.perf_counter() - clock.started),
                "prompt_eval_count": embedded.prompt_tokens,
            }
        )

    async def embeddings(self, request: Request) -> Response:
        """Ollama's older embeddings route: one prompt's vector, at unit length (Ollama's is
        as the model pools it)."""
        asked = validated(EmbeddingsBody, await self.server.body(request))
        pool = self.server.worker.pool
        model_id = _model_id(asked.model, pool)
        if not asked.prompt:
            return JSONResponse({"embedding": []})
        try:
            embedded = await embeddings.embed(pool, model_id, [asked.prompt], listed=False)
        except ApiError as error:
            raise _in_ollama_terms(error, EMBEDDINGS_FIELDS) from None
        return JSONResponse({"embedding": embedded.vectors[0].tolist()})

    async def _answer(
        self,
        request: Request,
        asked: Asked,
        generation: GenerationRequest,
        fields: Fields,
        clock: Clock,
    ) -> Response:
        try:
            (job,) = await self.server.start(request, generation, "ollama-")
        except ApiError as error:  # the worker's, about the prompt or the constraint
            raise _in_ollama_terms(error) from None
        clock.prefilled = time.perf_counter()
        if asked.stream:
            return StreamingResponse(_lines(job, asked.model, fields, clock), media_type=NDJSON)
        answer = await answers.whole(job)
        return JSONResponse(
            {
                **_head(asked.model),
                **fields(answer.text, answer.reasoning, answer.calls),
                **_end(job, answer.finish, clock),
            }
        )

    async def tags(self, request: Request) -> Response:
        """The models this server answers for, as Ollama lists the models it has."""
        pool = self.server.worker.pool
        served: list[Served[Any]] = [*pool.served.values(), *pool.embedding.values()]
        return JSONResponse({"models": await asyncio.to_thread(lambda: list(map(_listed, served)))})

    async def ps(self, request: Request) -> Response:
        """The models loaded now, with the memory they take and their context."""
        pool = self.server.worker.pool
        loaded = [model for model in pool.served.values() if model.engine is not None]
        running = await asyncio.to_thread(lambda: [_running(m, pool.keep_alive) for m in loaded])
        return JSONResponse({"models": running})

    async def show(self, request: Request) -> Response:
        """A model's details, its GGUF metadata, chat template and capabilities."""
        asked = validated(ShowBody, await self.server.body(request))
        named = asked.model or asked.name
        if not named:
            raise ApiError(400, "model is required")
        worker = self.server.worker
        model = _model(named, worker.pool)
        path = _file(model)
        facts = await asyncio.to_thread(model_facts, path)
        capabilities = ["completion"]
        if tool_format(facts.template) != "generic":  # the template renders tools itself
            capabilities.append("tools")
        options = {option: name for name, option in FIELDS_OF_OPTIONS.items()}
        defaults = worker.defaults
        return JSONResponse(
            {
                "modelfile": f"# specrun serves {model.id} from its GGUF file\nFROM {path}\n",
                "parameters": "\n".join(
                    f"{name:<30} {getattr(defaults, options.get(name, name))}" for name in SAMPLING
                ),
                "template": facts.template or "",
                "details": facts.details(),
                "model_info": facts.model_info(asked.verbose),
                "capabilities": capabilities,
                "modified_at": facts.modified_at,
            }
        )

    async def version(self, request: Request) -> Response:
        """The Ollama API version these routes follow, and specrun's."""
        return JSONResponse({"version": OLLAMA_VERSION, "specrun": __version__})

    async def unmanaged(self, request: Request) -> Response:
        """Refused: specrun's commands manage its models."""
        raise ApiError(
            501,
            f"specrun does not manage models through Ollama's API ({request.url.path}): "
            "`specrun models pull ALIAS` downloads one, `specrun models rm ALIAS` removes one, "
            "and `specrun serve -t MODEL --model OTHER` serves them",
            code="not_implemented",
        )


def _loaded(asked: Asked, fields: Fields) -> Response:
    """Ollama's answer to a request with nothing to answer, which asks it to load the model:
    here it loads at its first request."""
    return JSONResponse(
        {**_head(asked.model), **fields("", "", ()), "done": True, "done_reason": "load"}
    )


def _listed(model: Served[Any]) -> dict[str, object]:
    name = model.id + LATEST
    facts = model_facts(_file(model))
    return {
        "name": name,
        "model": name,
        "modified_at": facts.modified_at,
        "size": facts.size,
        **({"digest": facts.digest} if facts.digest else {}),
        "details": facts.details(),
    }


def _running(model: Served[Any], keep_alive: float | None) -> dict[str, object]:
    assert model.engine is not None, "only loaded models run"
    listed = {**_listed(model), "size": model.bytes_needed(), "context_length": _context(model)}
    if keep_alive is not None:  # unloaded after that long idle; in use, it is not idle yet
        idle_since = time.monotonic() if model.in_use else model.last_used
        expires = time.time() + idle_since + keep_alive - time.monotonic()
        listed["expires_at"] = datetime.fromtimestamp(expires, timezone.utc).isoformat()
    return listed


async def running(request: Request) -> Response:
    """Ollama's answer at `/`, where its clients check that a server is up."""
    return PlainTextResponse(RUNNING)


def routes(server: Service) -> list[Route]:
    api = OllamaApi(server)
    return [
        Route("/api/chat", api.chat, methods=["POST"]),
        Route("/api/generate", api.generate, methods=["POST"]),
        Route("/api/tags", api.tags, methods=["GET"]),
        Route("/api/ps", api.ps, methods=["GET"]),
        Route("/api/show", api.show, methods=["POST"]),
        Route("/api/embed", api.embed, methods=["POST"]),
        Route("/api/embeddings", api.embeddings, methods=["POST"]),
        Route("/api/version", api.version, methods=["GET"]),
        *(Route(path, api.unmanaged, methods=[method]) for path, method in MANAGEMENT),
    ]


def error_body(error: ApiError) -> dict[str, object]:
    """Ollama's error shape, {"error": message}, which has no field of its own for the one at
    fault: the message names it."""
    message, param = str(error), error.param
    named = not param or f"`{param}`" in message
    return {"error": message if named else f"`{param}`: {message}"}


# The routes' bodies, for the OpenAPI document.
BODIES: dict[str, type[BaseModel]] = {
    "/api/chat": ChatBody,
    "/api/generate": GenerateBody,
    "/api/show": ShowBody,
    "/api/embed": EmbedBody,
    "/api/embeddings": EmbeddingsBody,
}
FAMILY = Family("ollama", ("/api/",), routes, BODIES, error_body)
