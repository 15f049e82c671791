"""`specrun serve`'s server: an OpenAI-compatible HTTP API over one `Engine`.

One engine holds one KV cache and is not thread-safe, so generations run one at a
time, in one worker thread: llama.cpp is native code, and the event loop must stay
free to accept requests, stream answers and notice clients that leave. The rest wait
in a bounded queue (a full one answers 503 with Retry-After); a client that leaves
cancels its generation at the next round, or its place in the queue. Nothing resets
the caches between requests, so a request that shares a prefix with the last one
(the next turn of a chat) evaluates only what is new.

Every figure comes from a `Stats` fed the engine's events on the event loop: a
response's `specrun` object is `Stats.as_dict()`, the figures of `run --json`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from specrun.core.loop import Event, Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.core.stats import Stats
from specrun.engine import Engine
from specrun.errors import OptionError, SpecrunError
from specrun.server.requests import (
    ApiError,
    GenerationRequest,
    bad_value,
    chat_request,
    completion_request,
)
from specrun.system import interrupts

MAX_BODY_BYTES = 4 * 2**20  # far more than any context holds as text
RETRY_AFTER_SECONDS = 1
SHUTDOWN_GRACE_SECONDS = 5  # for clients still reading their last chunks when the server stops
# What /v1/stats counts: requests admitted, how each ended, 503s, and tokens.
TOTALS = (
    "requests",
    "stop",
    "length",
    "cancelled",
    "failed",
    "rejected",
    "prompt_tokens",
    "completion_tokens",
)


def _shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", kind="server_error", code="shutting_down")


@dataclass(frozen=True)
class Endpoint:
    """What differs between /v1/chat/completions and /v1/completions."""

    object: str
    chunk_object: str
    id_prefix: str
    request: Callable[[dict[str, Any], str, SamplingParams], GenerationRequest]
    whole: Callable[[str], dict[str, object]]  # the answer, in a response's choice
    part: Callable[[str], dict[str, object]]  # a piece of it, in a streamed chunk's choice
    opening: dict[str, object] | None  # the first streamed choice, before any text


CHAT = Endpoint(
    "chat.completion",
    "chat.completion.chunk",
    "chatcmpl-",
    chat_request,
    whole=lambda text: {"message": {"role": "assistant", "content": text}},
    part=lambda text: {"delta": {"content": text}},
    opening={"delta": {"role": "assistant", "content": ""}},
)
COMPLETION = Endpoint(
    "text_completion",
    "text_completion",
    "cmpl-",
    completion_request,
    whole=lambda text: {"text": text},
    part=lambda text: {"text": text},
    opening=None,
)


async def _json_body(request: Request) -> dict[str, Any]:
    declared = request.headers.get("content-length", "")
    too_large = ApiError(
        413, f"the body is larger than {MAX_BODY_BYTES} bytes", code="body_too_large"
    )
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():  # a chunked body declares no length
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise too_large
    try:
        value = json.loads(body)
    except ValueError as error:
        raise ApiError(400, f"the body is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object")
    return value


# --- generations -----------------------------------------------------------------------------


@dataclass
class Job:
    """An admitted request. The worker thread hands its events to the event loop, where they
    feed `stats` and wait in `events`; `cancel` is what the worker polls between rounds."""

    request: GenerationRequest
    id: str
    created: int = field(default_factory=lambda: int(time.time()))
    cancel: threading.Event = field(default_factory=threading.Event)
    stats: Stats = field(default_factory=Stats)
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    task: asyncio.Task | None = None
    ended: bool = False  # its error or its end was delivered

    def deliver(self, item: Event | Exception | None) -> None:
        """On the event loop: an event, the error that ended the job, or None at its end."""
        if isinstance(item, (Prefill, Round)):
            self.stats.add(item)
        self.ended = not isinstance(item, (Prefill, Round))
        self.events.put_nowait(item)

    async def next(self) -> Event | None:
        item = await self.events.get()
        if isinstance(item, Exception):
            raise item
        return item

    def outcome(self) -> str:
        """stop, length, cancelled (the client left, or the server stopped) or failed."""
        reason = self.stats.finish_reason
        if reason is None:
            return "cancelled" if self.cancel.is_set() else "failed"
        return "length" if reason == "context" else reason

    def finish_reason(self) -> str:
        """OpenAI's finish_reason. A generation cut short has nobody to tell but a client
        of a server that is stopping."""
        outcome = self.outcome()
        if outcome == "cancelled":
            raise _shutting_down()
        return outcome


class Worker:
    """The engine's one thread: one generation at a time, up to `queue` more waiting."""

    def __init__(self, engine: Engine, *, queue: int) -> None:
        self.engine = engine
        self.defaults = engine.params  # the command line's sampling; each request starts from it
        self.capacity = queue + 1  # the generation running and those waiting
        self.jobs: list[Job] = []  # admitted, in order; the first may be running
        self.running: Job | None = None
        self.stopping = False
        self.totals = Counter(dict.fromkeys(TOTALS, 0))
        self._turn = asyncio.Lock()  # FIFO: requests run in the order they came
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="specrun-generation")

    def submit(self, request: GenerationRequest, id_prefix: str, receive: Receive) -> Job:
        if self.stopping:
            raise _shutting_down()
        if len(self.jobs) >= self.capacity:
            self.totals["rejected"] += 1
            raise ApiError(
                503,
                f"the server is busy: {len(self.jobs)} requests are ahead of this one; retry later",
                kind="server_error",
                code="queue_full",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        job = Job(request, id_prefix + secrets.token_hex(12))
        self.jobs.append(job)
        self.totals["requests"] += 1
        job.task = asyncio.create_task(self._run(job, receive))
        return job

    async def _run(self, job: Job, receive: Receive) -> None:
        """Wait for the job's turn and generate."""
        loop = asyncio.get_running_loop()
        watcher = asyncio.create_task(self._watch(job, receive))
        try:
            async with self._turn:
                if not job.cancel.is_set():
                    self.running = job
                    hand = lambda item: loop.call_soon_threadsafe(job.deliver, item)  # noqa: E731
                    await loop.run_in_executor(self._thread, self._generate, job, hand)
        finally:
            watcher.cancel()
            if self.running is job:
                self.running = None
            self.jobs.remove(job)
            self._count(job)
            if not job.ended:  # it never ran: only a server that stops has someone to tell
                job.deliver(_shutting_down())

    async def _watch(self, job: Job, receive: Receive) -> None:
        """A client that leaves cancels its generation at the next round, or leaves the queue at once."""
        while (await receive())["type"] != "http.disconnect":
            pass  # the body was read already; nothing else arrives before the disconnect
        job.cancel.set()
        if job is not self.running:
            job.task.cancel()

    def _generate(self, job: Job, hand: Callable[[Event | Exception | None], None]) -> None:
        """In the worker thread: hand over the job's events, then None, or the error that ended it."""
        engine, tokens, started = self.engine, [], False
        try:
            tokens = job.request.tokens(engine)
            max_tokens = (
                engine.target.n_ctx if job.request.max_tokens is None else job.request.max_tokens
            )
            for event in engine.stream(
                tokens,
                max_tokens=max_tokens,
                stop=job.request.stop,
                cancelled=job.cancel.is_set,
                params=job.request.params,  # its own: the engine's stay the command line's
            ):
                started = True
                hand(event)
        except SpecrunError as error:
            hand(self._failure(error, job.request, len(tokens), started))
        except Exception as error:  # a bug: the handler turns it into a 500 and logs it
            hand(error)
        else:
            hand(None)

    def _failure(
        self, error: SpecrunError, request: GenerationRequest, prompt_length: int, started: bool
    ) -> ApiError:
        """Before the prompt is in, an error is the request's; after, the server's."""
        if started:
            return ApiError(500, str(error), kind="server_error")
        if isinstance(error, OptionError):
            return bad_value(error)
        too_long = prompt_length >= self.engine.target.n_ctx
        return ApiError(
            400,
            str(error),
            param=request.prompt_field,
            code="context_length_exceeded" if too_long else None,
        )

    def _count(self, job: Job) -> None:
        self.totals[job.outcome()] += 1
        self.totals["prompt_tokens"] += job.stats.prompt_tokens
        self.totals["completion_tokens"] += job.stats.generated

    def snapshot(self) -> dict[str, object]:
        """The running generation's live figures, the queue, and the totals since the start."""
        running = self.running
        live = running and {
            "id": running.id,
            "recent_tokens_per_second": running.stats.recent_tokens_per_second,
            **running.stats.as_dict(),
        }
        invariance = self.engine.target.invariance  # with --reproducible: how the target decodes
        return {
            "running": live,
            "queued": len(self.jobs) - (running is not None),
            "totals": dict(self.totals),
            "reproducible": invariance and invariance.mode,
        }

    async def stop(self) -> None:
        """Cancel every generation, running or waiting, and wait until the engine is free."""
        self.stopping = True
        for job in self.jobs:
            job.cancel.set()
        await asyncio.gather(*(job.task for job in list(self.jobs)), return_exceptions=True)

    def close(self) -> None:
        """After the event loop: the engine may be closed once the worker thread is done."""
        for job in self.jobs:
            job.cancel.set()
        self._thread.shutdown(wait=True)


# --- responses -------------------------------------------------------------------------------


def _usage(stats: Stats) -> dict[str, int]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated,
        "total_tokens": stats.prompt_tokens + stats.generated,
    }


def _sse(record: dict[str, object]) -> str:
    return f"data: {json.dumps(record)}\n\n"


@dataclass(frozen=True)
class Api:
    """The HTTP endpoints over a worker."""

    worker: Worker
    model: str  # the one model id served
    started: int = field(default_factory=lambda: int(time.time()))

    def app(self, api_key: str | None) -> Starlette:
        routes = [
            Route("/health", self.health),
            Route("/v1/models", self.models),
            Route("/v1/stats", self.stats),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
        ]
        return Starlette(
            routes=routes,
            middleware=[Middleware(BearerAuth, key=api_key)] if api_key else [],
            exception_handlers={
                ApiError: _api_error,
                HTTPException: _http_error,
                Exception: _internal_error,
            },
        )

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": self.started,
                        "owned_by": "specrun",
                    }
                ],
            }
        )

    async def stats(self, request: Request) -> Response:
        return JSONResponse({"model": self.model, **self.worker.snapshot()})

    async def chat(self, request: Request) -> Response:
        return await self._generation(request, CHAT)

    async def completions(self, request: Request) -> Response:
        return await self._generation(request, COMPLETION)

    async def _generation(self, request: Request, endpoint: Endpoint) -> Response:
        body = await _json_body(request)
        generation = endpoint.request(body, self.model, self.worker.defaults)
        job = self.worker.submit(generation, endpoint.id_prefix, request.receive)
        await job.next()  # the prompt is in, or the request's error comes before any header is sent
        if generation.stream:
            return StreamingResponse(
                self._chunks(job, endpoint),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return await self._answer(job, endpoint)

    def _record(
        self, job: Job, endpoint: Endpoint, choice: dict[str, object], *, chunk: bool
    ) -> dict[str, object]:
        return {
            "id": job.id,
            "object": endpoint.chunk_object if chunk else endpoint.object,
            "created": job.created,
            "model": self.model,
            "choices": [{"index": 0, **choice}],
        }

    async def _answer(self, job: Job, endpoint: Endpoint) -> Response:
        text = []
        while (event := await job.next()) is not None:
            text.append(event.text)
        choice = {
            **endpoint.whole("".join(text)),
            "logprobs": None,
            "finish_reason": job.finish_reason(),
        }
        return JSONResponse(
            {
                **self._record(job, endpoint, choice, chunk=False),
                "usage": _usage(job.stats),
                "specrun": job.stats.as_dict(),
            }
        )

    async def _chunks(self, job: Job, endpoint: Endpoint) -> AsyncIterator[str]:
        """Server-sent events in OpenAI's chunk format; the last chunk carries usage and the figures."""
        try:
            if endpoint.opening:
                yield _sse(
                    self._record(
                        job, endpoint, {**endpoint.opening, "finish_reason": None}, chunk=True
                    )
                )
            while (event := await job.next()) is not None:
                if event.text:
                    yield _sse(
                        self._record(
                            job,
                            endpoint,
                            {**endpoint.part(event.text), "finish_reason": None},
                            chunk=True,
                        )
                    )
            last = self._record(
                job,
                endpoint,
                {**endpoint.part(""), "finish_reason": job.finish_reason()},
                chunk=True,
            )
            yield _sse({**last, "usage": _usage(job.stats), "specrun": job.stats.as_dict()})
        except ApiError as error:  # the answer had begun: the error is the stream's last word
            yield _sse(error.body())
        yield "data: [DONE]\n\n"


class BearerAuth:
    """Every path but /health needs `Authorization: Bearer <key>`."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            given = Headers(scope=scope).get("authorization", "").encode()
            if not hmac.compare_digest(given, self.expected):
                error = ApiError(
                    401,
                    "a valid API key is required: `Authorization: Bearer <key>`",
                    code="invalid_api_key",
                )
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return error.response()


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)  # an unknown path or method
    return ApiError(error.status_code, error.detail, headers=error.headers).response()


async def _internal_error(request: Request, error: Exception) -> Response:
    """A bug: an OpenAI-style 500; uvicorn logs the traceback."""
    return ApiError(
        500, f"internal error: {type(error).__name__}: {error}", kind="server_error"
    ).response()


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
    engine: Engine,
    listener: socket.socket,
    *,
    model: str,
    api_key: str | None,
    queue: int,
    ready: Callable[[], None],
) -> None:
    """Serve until SIGINT, SIGTERM or SIGHUP; `ready` hears when requests are taken. Return
    once the engine is free to close."""
    worker = Worker(engine, queue=queue)
    config = uvicorn.Config(
        Api(worker, model).app(api_key),
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
