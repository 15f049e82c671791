"""`specrun serve`'s HTTP side: the Starlette routes of an OpenAI-compatible API (chat and
text completions, answered whole or streamed as server-sent events, with models, stats,
health and the OpenAPI document of the routes' bodies) over a `Worker`, the middleware before
them (the Host and content-type gate, the bearer key), the body read against its deadline,
every error in OpenAI's shape, and uvicorn on `Connection` under the command's signal policy.
A response's `specrun` object is its job's `Stats.as_dict()`, the figures of `run --json`."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Generic, Literal, TypeVar

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from specrun import __version__
from specrun.core.sampling import SamplingParams, TokenLogprob
from specrun.core.stats import Stats
from specrun.server import (
    answers,
    anthropic,
    embeddings,
    infill,
    metrics,
    ollama,
    openapi,
    responses,
)
from specrun.server.bodies import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    GenerationBody,
    InfillRequest,
)
from specrun.server.connection import connection_type, late
from specrun.server.family import TENANT, Family, error_body_for, tenant
from specrun.server.pool import ModelPool
from specrun.server.requests import (
    AllowedHosts,
    ApiError,
    GenerationRequest,
    chat_request,
    check_json_content,
    checked,
    completion_request,
    echoed,
    infill_request,
    parse_body,
)
from specrun.server.worker import Job, Worker
from specrun.system import interrupts
from specrun.tools import ToolCall

MAX_BODY_BYTES = 4 * 2**20  # far more than any context holds as text
READ_TIMEOUT_SECONDS = 60.0  # for a request's headers, and again for its body
LOOPBACK = AllowedHosts.of("127.0.0.1")
LOG = logging.getLogger("uvicorn.error")  # where uvicorn logs the tracebacks of failed requests
SHUTDOWN_GRACE_SECONDS = 5  # for clients still reading their last chunks when the server stops
# OpenAI's `object` of a response or a streamed chunk, as each endpoint names it.
ObjectName = Literal["chat.completion", "chat.completion.chunk", "text_completion"]
Body = TypeVar("Body", bound=GenerationBody)
# The API families served beside OpenAI's, each under its own paths.
FAMILIES: tuple[Family, ...] = (anthropic.FAMILY, responses.FAMILY, ollama.FAMILY)


Piece = Callable[[int], bytes]  # a token's bytes in text


def _text(piece: Piece, token: int) -> str:
    return piece(token).decode("utf-8", errors="replace")


def _chat_logprobs(entries: list[TokenLogprob], piece: Piece, offset: int) -> dict[str, object]:
    """OpenAI's chat `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}."""

    def one(token: int, logprob: float) -> dict[str, object]:
        return {"token": _text(piece, token), "logprob": logprob, "bytes": list(piece(token))}

    return {
        "content": [
            {**one(e.token, e.logprob), "top_logprobs": [one(t, lp) for t, lp in e.top]}
            for e in entries
        ]
    }


def _completion_logprobs(
    entries: list[TokenLogprob], piece: Piece, offset: int
) -> dict[str, object]:
    """The legacy completions `logprobs`: parallel lists, the text offset of each token
    counted from `offset` (in characters of the answer)."""
    texts = [_text(piece, entry.token) for entry in entries]
    return {
        "tokens": texts,
        "token_logprobs": [entry.logprob for entry in entries],
        "top_logprobs": [{_text(piece, t): lp for t, lp in entry.top} for entry in entries],
        "text_offset": list(accumulate(map(len, texts), initial=offset))[:-1],
    }


@dataclass(frozen=True)
class Endpoint(Generic[Body]):
    """What differs between /v1/chat/completions and /v1/completions."""

    path: str
    body: type[Body]  # the body it takes, as declared
    object_name: ObjectName  # a response's "object"
    chunk_object_name: ObjectName  # a streamed chunk's
    id_prefix: Literal["chatcmpl-", "cmpl-"]  # of the ids of its answers
    request: Callable[[Body, Mapping[str, str], SamplingParams], GenerationRequest]
    whole: Callable[[str], dict[str, object]]  # the answer, in a response's choice
    part: Callable[[str], dict[str, object]]  # a piece of it, in a streamed chunk's choice
    opening: dict[str, object] | None  # the first streamed choice, before any text
    # The tokens' log-probabilities as the endpoint lists them, from a text offset.
    logprobs: Callable[[list[TokenLogprob], Piece, int], dict[str, object]]


CHAT = Endpoint(
    "/v1/chat/completions",
    ChatCompletionRequest,
    "chat.completion",
    "chat.completion.chunk",
    "chatcmpl-",
    chat_request,
    whole=lambda text: {"message": {"role": "assistant", "content": text}},
    part=lambda text: {"delta": {"content": text}},
    opening={"delta": {"role": "assistant", "content": ""}},
    logprobs=_chat_logprobs,
)
COMPLETION = Endpoint(
    "/v1/completions",
    CompletionRequest,
    "text_completion",
    "text_completion",
    "cmpl-",
    completion_request,
    whole=lambda text: {"text": text},
    part=lambda text: {"text": text},
    opening=None,
    logprobs=_completion_logprobs,
)


async def _json_body(request: Request, deadline: float) -> dict[str, Any]:
    """The body, read within `deadline` seconds and at most MAX_BODY_BYTES, as checked JSON."""
    declared = request.headers.get("content-length", "")
    too_large = ApiError(
        413, f"the body is larger than {MAX_BODY_BYTES} bytes", code="body_too_large"
    )
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large

    async def read() -> bytes:
        body = bytearray()
        async for chunk in request.stream():  # a chunked body declares no length
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise too_large
        return bytes(body)

    try:
        body = await asyncio.wait_for(read(), deadline)
    except asyncio.TimeoutError:
        raise late("body", deadline) from None
    except ClientDisconnect:  # nobody reads the answer; an error keeps it out of the log
        raise ApiError(400, "the client left before its body was sent") from None
    # Off the event loop, as the request's conversion: a body of MAX_BODY_BYTES (a logit_bias
    # over the whole vocabulary) takes a few hundred milliseconds to parse and check.
    return await asyncio.to_thread(parse_body, body)


# --- responses -------------------------------------------------------------------------------


def _call(call: ToolCall) -> dict[str, object]:
    """A tool call as OpenAI's API writes it."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _usage(answers: list[Stats]) -> dict[str, int]:
    """A request's tokens: its prompt once, the answers' together (OpenAI's, for `n` > 1)."""
    prompt, completion = answers[0].prompt_tokens, sum(stats.generated for stats in answers)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _sse(record: dict[str, object]) -> str:
    return f"data: {json.dumps(record)}\n\n"


@dataclass(frozen=True)
class Api:
    """The HTTP endpoints over a worker."""

    worker: Worker
    started: int = field(default_factory=lambda: int(time.time()))
    read_timeout: float = READ_TIMEOUT_SECONDS  # for a request's body, once its headers are in

    def app(
        self,
        api_keys: tuple[str, ...],
        hosts: AllowedHosts = LOOPBACK,
        cors: tuple[str, ...] = (),
    ) -> Starlette:
        """`api_keys`: those a request may carry, each its own tenant (none: no key needed, one
        tenant). `cors`: the origins whose pages may call the API (`*`: any); outermost, so
        that a browser's preflight, which carries no key, is answered, and errors carry the
        headers."""
        routes = [
            Route("/health", self.health),
            Route("/metrics", self.metrics),
            Route("/v1/models", self.models),
            Route("/v1/stats", self.stats),
            Route(CHAT.path, self.chat, methods=["POST"]),
            Route(COMPLETION.path, self.completions, methods=["POST"]),
            Route(embeddings.PATH, self.embeddings, methods=["POST"]),
            Route(infill.PATH, self.infill, methods=["POST"]),
            Route("/openapi.json", self.openapi),
            *(route for family in FAMILIES for route in family.routes(self)),
            # Ollama's clients check that a server is up at `/` (HEAD too: Starlette's GET).
            *([Route("/", ollama.running)] if ollama.FAMILY in FAMILIES else []),
        ]
        return Starlette(
            routes=routes,
            middleware=[
                *(
                    [
                        Middleware(
                            Cors,
                            allow_origins=list(cors),
                            allow_methods=["GET", "POST"],
                            allow_headers=[
                                "Authorization",
                                "Content-Type",
                                "X-Api-Key",
                                "Anthropic-Version",
                            ],
                            max_age=600,
                        )
                    ]
                    if cors
                    else []
                ),
                Middleware(Gate, hosts=hosts),
                *([Middleware(BearerAuth, keys=api_keys)] if api_keys else []),
            ],
            exception_handlers={
                ApiError: _api_error,
                HTTPException: _http_error,
                Exception: _internal_error,
            },
        )

    async def health(self, request: Request) -> Response:
        """Whether the server answers."""
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        """The models requests may name, the default first; `loaded`: in memory now (one
        that is not loads when a request names it)."""
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": model["id"],
                        "object": "model",
                        "created": self.started,
                        "owned_by": "specrun",
                        "loaded": model["loaded"],
                    }
                    for model in self.worker.pool.snapshot()
                ],
            }
        )

    async def metrics(self, request: Request) -> Response:
        """The counters, as Prometheus text."""
        return Response(metrics.exposition(self.worker), media_type=metrics.CONTENT_TYPE)

    async def stats(self, request: Request) -> Response:
        """The running generations' figures, the slots, the queue and the totals."""
        return JSONResponse({"model": self.worker.pool.default, **self.worker.snapshot()})

    async def chat(self, request: Request) -> Response:
        """A conversation's next message, whole or streamed as server-sent events."""
        return await self._generation(request, CHAT)

    async def completions(self, request: Request) -> Response:
        """Text that continues the prompt, whole or streamed as server-sent events."""
        return await self._generation(request, COMPLETION)

    async def embeddings(self, request: Request) -> Response:
        """Each input's vector, at unit length, by an embedding model (--embedding-model)."""
        return JSONResponse(await embeddings.answer(self.worker.pool, await self.body(request)))

    async def infill(self, request: Request) -> Response:
        """llama-server's: the text between `input_prefix` and `input_suffix`, by a model with
        fill-in-the-middle tokens, whole or streamed in llama-server's completion shape."""
        body = checked(InfillRequest, await self.body(request))
        generation = await asyncio.to_thread(
            infill_request, body, self.worker.pool.names, self.worker.defaults
        )
        (job,) = await self.start(request, generation, infill.ID_PREFIX)
        if generation.stream:
            return StreamingResponse(
                infill.events(job),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return JSONResponse(await infill.whole(job))

    async def openapi(self, request: Request) -> Response:
        """This document: the routes, and the request bodies they take."""
        bodies = {
            **{endpoint.path: endpoint.body for endpoint in (CHAT, COMPLETION)},
            embeddings.PATH: EmbeddingRequest,
            infill.PATH: InfillRequest,
        }
        # Each family's bodies, the models its module declares named with the family's name.
        families = [
            (family, path, body) for family in FAMILIES for path, body in family.bodies.items()
        ]
        documented = {**bodies, **{path: body for _, path, body in families}}
        namespaces = {body.__module__: family.name for family, _, body in families}
        document = openapi.document(request.app.routes, documented, __version__, namespaces)
        return JSONResponse(document)

    async def body(self, request: Request) -> dict[str, Any]:
        """The request's body, read within the deadline, as checked JSON (any family's)."""
        return await _json_body(request, self.read_timeout)

    async def start(
        self, request: Request, generation: GenerationRequest, id_prefix: str
    ) -> list[Job]:
        """Submit a checked request's generations with its key's tenant (BearerAuth's: whose
        earlier answers the drafts may come from); its jobs once each prompt is in. The
        request's error comes from here, before any header is sent (any family's)."""
        embeddings.check_generates(self.worker.pool, generation.model)
        jobs = self.worker.submit(generation, id_prefix, request.receive, tenant(request))
        for job in jobs:  # the Prefills
            await job.next()
        return jobs

    async def _generation(self, request: Request, endpoint: Endpoint[Body]) -> Response:
        body = checked(endpoint.body, await self.body(request))
        # Off the event loop: a schema's conversion to a grammar takes up to half a second.
        generation = await asyncio.to_thread(
            endpoint.request, body, self.worker.pool.names, self.worker.defaults
        )
        jobs = await self.start(request, generation, endpoint.id_prefix)
        if generation.stream:
            return StreamingResponse(
                self._chunks(jobs, endpoint),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return await self._answer(jobs, endpoint)

    def _record(
        self, job: Job, endpoint: Endpoint[Any], choices: list[dict[str, object]], *, chunk: bool
    ) -> dict[str, object]:
        return {
            "id": job.id,
            "object": endpoint.chunk_object_name if chunk else endpoint.object_name,
            "created": job.created,
            "model": job.request.model,
            "choices": choices,
        }

    def _logprobs(
        self, job: Job, endpoint: Endpoint[Any], entries: list[TokenLogprob], offset: int = 0
    ) -> dict[str, object] | None:
        if job.request.logprobs is None:
            return None
        assert job.engine is not None, "a job with rounds ran on its engine"
        return endpoint.logprobs(entries, job.engine.target.piece, offset)

    async def _answer(self, jobs: list[Job], endpoint: Endpoint[Any]) -> Response:
        choices = [
            {"index": index, **await self._choice(job, endpoint)} for index, job in enumerate(jobs)
        ]
        return JSONResponse(
            {
                **self._record(jobs[0], endpoint, choices, chunk=False),
                "usage": _usage([job.stats for job in jobs]),
                "specrun": jobs[0].stats.as_dict(),
            }
        )

    async def _choice(self, job: Job, endpoint: Endpoint[Any]) -> dict[str, object]:
        """One whole answer: its text or tool calls, log-probabilities and finish_reason."""
        answer = await answers.whole(job)
        message = endpoint.whole(answer.text)
        if answer.calls or answer.reasoning:  # only a chat's answer has either
            message = {
                "message": {
                    "role": "assistant",
                    "content": answer.text or None,
                    **({"reasoning_content": answer.reasoning} if answer.reasoning else {}),
                    **({"tool_calls": [_call(c) for c in answer.calls]} if answer.calls else {}),
                }
            }
        return {
            **message,
            "logprobs": self._logprobs(job, endpoint, answer.logprobs),
            "finish_reason": answer.finish,
        }

    async def _chunks(self, jobs: list[Job], endpoint: Endpoint[Any]) -> AsyncIterator[str]:
        """Server-sent events in OpenAI's chunk format, each answer's chunks by its index as
        they come. The usage and the figures come in the last chunk; with
        `stream_options.include_usage`, as OpenAI sends them: in a chunk of their own with no
        choices, after every other chunk's `"usage": null`."""
        first = jobs[0]
        separate = first.request.include_usage
        no_usage: dict[str, object] = {"usage": None} if separate else {}
        merged: asyncio.Queue[tuple[int, dict[str, object]] | ApiError | None] = asyncio.Queue()

        async def produce(index: int, job: Job) -> None:
            try:
                async for choice in self._deltas(job, endpoint):
                    merged.put_nowait((index, choice))
            except ApiError as error:
                merged.put_nowait(error)
            except Exception as error:  # a bug in its generation: the stream must still end
                LOG.error("a streamed answer failed", exc_info=error)
                merged.put_nowait(_bug(error))
            merged.put_nowait(None)

        producers = [asyncio.create_task(produce(i, job)) for i, job in enumerate(jobs)]
        held: dict[str, object] | None = None  # the latest chunk, sent once another comes
        try:
            running = len(producers)
            while running:
                item = await merged.get()
                if item is None:
                    running -= 1
                    continue
                if isinstance(item, ApiError):  # the answer had begun: the stream's last word
                    yield _sse(item.body())
                    break
                index, choice = item
                if held is not None:
                    yield _sse(held)
                held = {
                    **self._record(first, endpoint, [{"index": index, **choice}], chunk=True),
                    **no_usage,
                }
            else:
                assert held is not None, "every answer ends in a chunk with its finish_reason"
                figures = {
                    "usage": _usage([job.stats for job in jobs]),
                    "specrun": first.stats.as_dict(),
                }
                if separate:
                    yield _sse(held)
                    held = {**self._record(first, endpoint, [], chunk=True)}
                yield _sse({**held, **figures})
        finally:
            for producer in producers:
                producer.cancel()
        yield "data: [DONE]\n\n"

    async def _deltas(self, job: Job, endpoint: Endpoint[Any]) -> AsyncIterator[dict[str, object]]:
        """One answer's chunks as choices (without their index): the opening, the text as it
        comes (what may be a tool call held until the answer ends), then its finish_reason."""
        if endpoint.opening:
            yield {**endpoint.opening, "finish_reason": None}
        offset = 0  # characters of the answer streamed so far
        made_calls = False
        async for part in answers.parts(job):
            if isinstance(part, answers.CallsPart):
                made_calls = True
                calls = [{"index": i, **_call(c)} for i, c in enumerate(part.calls)]
                yield {"delta": {"tool_calls": calls}, "finish_reason": None}
                continue
            if isinstance(part, answers.ReasoningPart):  # as DeepSeek's API and llama-server
                yield {"delta": {"reasoning_content": part.text}, "finish_reason": None}
                continue
            logprobs = self._logprobs(job, endpoint, list(part.logprobs), offset)
            chunk = {**endpoint.part(part.text), "finish_reason": None}
            yield {**chunk, **({"logprobs": logprobs} if logprobs else {})}
            offset += len(part.text)
        yield {**endpoint.part(""), "finish_reason": answers.finish(job, made_calls)}


class Cors(CORSMiddleware):
    """Starlette's CORS, whose refusal of a browser's preflight is an error in the API's shape
    rather than plain text."""

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code != 400:
            return answer
        origin = echoed(request_headers["origin"])
        refused = bytes(answer.body).decode().removeprefix("Disallowed CORS ")  # "origin, method"
        hint = (
            f"; start the server with --cors {origin} to let it in" if "origin" in refused else ""
        )
        return ApiError(
            400,
            f"a page from `{origin}` may not call this API (not allowed: {refused}){hint}",
            code="cors_not_allowed",
            headers={
                name: value
                for name, value in answer.headers.items()
                if name not in ("content-length", "content-type")  # the JSON body's own instead
            },
        ).response()


class Gate:
    """Before routing: a request must name this server by a Host it answers to, and a POST's
    body must be declared JSON. Together they keep web pages out: a page may send a plain-text
    POST anywhere unasked, and one whose name is rebound to this machine sends its own name."""

    def __init__(self, app: ASGIApp, hosts: AllowedHosts) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            try:
                self.hosts.admit(headers.get("host"))
                if scope["method"] == "POST":
                    check_json_content(headers.get("content-type"))
            except ApiError as error:
                await _error_response(scope["path"], error)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BearerAuth:
    """Every path but /health needs `Authorization: Bearer <key>` (or Anthropic's `x-api-key:
    <key>`), one of `keys`: the scheme in any case, as RFC 7235 has it, and the key compared
    as bytes (UTF-8, as a client sends it) with every key, in constant time. The request's
    tenant (scope state TENANT) is a digest of the key, the same whatever the keys' order and
    across restarts (a suffix store kept on disk stays with its key's clients): never the key
    itself, which nothing keeps or logs."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...]) -> None:
        # The bytes each key was given as: a command line's or environment's undecodable ones too.
        self.app = app
        self.expected = [key.encode("utf-8", "surrogateescape") for key in keys]
        self.tenants = ["key-" + hashlib.sha256(key).hexdigest()[:16] for key in self.expected]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            # Starlette decodes header values as Latin-1: encoded back, they are the bytes sent.
            headers = Headers(scope=scope)
            given = headers.get("authorization", "").encode("latin-1")
            scheme, _, key = given.partition(b" ")
            if not given and "x-api-key" in headers:  # Anthropic's clients send the key so
                scheme, key = b"bearer", headers["x-api-key"].encode("latin-1")
            # Every key compared, not only those up to the match: the time tells no place.
            matched = [hmac.compare_digest(key.lstrip(b" "), one) for one in self.expected]
            if True not in matched or scheme.lower() != b"bearer":
                error = ApiError(
                    401,
                    "a valid API key is required: `Authorization: Bearer <key>`",
                    code="invalid_api_key",
                )
                await _error_response(scope["path"], error)(scope, receive, send)
                return
            scope.setdefault("state", {})[TENANT] = self.tenants[matched.index(True)]
        await self.app(scope, receive, send)


def _error_response(path: str, error: ApiError) -> JSONResponse:
    """The error in the shape of the family `path` belongs to (OpenAI's by default)."""
    body = error_body_for(path, FAMILIES)(error)
    return JSONResponse(body, error.status, headers=error.headers)


async def _api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return _error_response(request.url.path, error)


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)  # an unknown path or method
    headers = dict(error.headers) if error.headers else None
    return _error_response(
        request.url.path, ApiError(error.status_code, error.detail, headers=headers)
    )


async def _internal_error(request: Request, error: Exception) -> Response:
    """A bug: a 500 in the family's shape. Starlette raises the error on once this is sent, and
    uvicorn logs its traceback and closes the connection: the answer says so, or the client's
    next request on it would meet a reset."""
    return _error_response(request.url.path, _bug(error, headers={"Connection": "close"}))


def _bug(error: Exception, headers: dict[str, str] | None = None) -> ApiError:
    """A bug's 500, in OpenAI's shape: the request fails, the server serves on."""
    return ApiError(
        500,
        f"internal error: {type(error).__name__}: {echoed(str(error))}",
        kind="server_error",
        headers=headers,
    )


# --- the server ------------------------------------------------------------------------------


class _Uvicorn(uvicorn.Server):
    """uvicorn under the command's signal policy, stopping the generations before it waits
    for the connections to finish."""

    def __init__(self, config: uvicorn.Config, worker: Worker, ready: Callable[[], None]) -> None:
        super().__init__(config)
        self.worker, self.ready = worker, ready

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # `serve` routes SIGINT, SIGTERM and SIGHUP to `stop` itself

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.worker.stop()
        await super().shutdown(sockets)

    def stop(self) -> None:
        """A signal: stop serving; a second one stops waiting for clients still reading."""
        self.force_exit = self.should_exit
        self.should_exit = True


def serve(
    pool: ModelPool,
    listener: socket.socket,
    *,
    defaults: SamplingParams,
    api_keys: tuple[str, ...],
    hosts: AllowedHosts,
    cors: tuple[str, ...] = (),
    queue: int,
    slots: int = 1,
    read_timeout: float,
    ready: Callable[[], None],
) -> None:
    """Serve the pool's models until SIGINT, SIGTERM or SIGHUP; `ready` hears when requests
    are taken. Return once the engines are free to close."""
    worker = Worker(pool, queue=queue, defaults=defaults, slots=slots)
    config = uvicorn.Config(
        Api(worker, read_timeout=read_timeout).app(api_keys, hosts, cors),
        http=connection_type(read_timeout),
        lifespan="off",
        ws="none",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    server = _Uvicorn(config, worker, ready)
    try:
        with interrupts.routed_to(server.stop):
            server.run(sockets=[listener])
    finally:
        worker.close()
