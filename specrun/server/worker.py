"""The generations of `specrun serve`: a bounded queue and a thread for each slot. An engine
loaded with `parallel` slots runs that many generations at once, their rounds decoded together
(`Engine.stream`, whose `Slots` hands each its slot); each runs in a thread of its own, since
llama.cpp is native code and the event loop must stay free to accept requests, stream answers
and notice clients that leave. The threads are the server's turn: as many as the slots, they
take the requests in the order they came (the executor's queue is first in, first out), each
the moment one is free (a slot freed by a generation that ends takes the next request at once),
however many models answer; the rest wait in the queue (a full one answers 503 with
Retry-After). A client that leaves cancels its generation at the next round, which frees its
slot, or its place in the queue. Nothing resets the caches between requests, so a
request that shares a prefix with the last one in its slot (the next turn of a chat) evaluates
only what is new. The engine's events feed each job's `Stats` on the event loop, and what
/v1/stats totals is counted here."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from typing import Literal, cast, get_args

from starlette.types import Receive

from specrun.context_overflow import ContextOverflow, answer_room, fit
from specrun.core.constraint import ConstraintError
from specrun.core.loop import Event, Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.core.stats import Stats
from specrun.engine import Engine
from specrun.errors import OptionError, SpecrunError
from specrun.server.pool import ModelPool
from specrun.server.requests import ApiError, GenerationRequest, bad_value

RETRY_AFTER_SECONDS = 1
# How a job ended (Job.outcome): the totals count each, and OpenAI's finish_reason is one.
Outcome = Literal["stop", "length", "cancelled", "failed"]
# What /v1/stats counts: requests admitted, how each ended, 503s, and tokens.
Total = Literal["requests", Outcome, "rejected", "prompt_tokens", "completion_tokens"]
TOTALS: tuple[Total, ...] = get_args(Total)  # nested Literals flatten, in this order


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", kind="server_error", code="shutting_down")


@dataclass
class Speculation:
    """Drafting since the server started, as vLLM counts it: rounds that drafted, tokens
    drafted, tokens accepted, and tokens accepted at each draft position."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def add(self, stats: Stats) -> None:
        self.drafts += stats.position_drafted[0] if stats.position_drafted else 0
        self.draft_tokens += stats.drafted
        self.accepted_tokens += stats.accepted
        for position, accepted in enumerate(stats.position_accepted):
            if position == len(self.accepted_per_position):
                self.accepted_per_position.append(0)
            self.accepted_per_position[position] += accepted


@dataclass
class Job:
    """An admitted request. The worker thread hands its events to the event loop, where they
    feed `stats` and wait in `events`; `cancel` is what the worker polls between rounds."""

    request: GenerationRequest
    id: str
    tenant: str | None = None  # whose earlier answers its drafts may use (its API key's)
    created: int = field(default_factory=lambda: int(time.time()))
    cancel: threading.Event = field(default_factory=threading.Event)
    stats: Stats = field(default_factory=Stats)
    events: asyncio.Queue[Event | Exception | None] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    turn: Future[None] | None = None  # its place in the generation threads' queue, then its run
    ended: bool = False  # its error or its end was delivered
    failed: bool = False  # what ended it was an error
    engine: Engine | None = None  # its model's, once it runs

    def deliver(self, item: Event | Exception | None) -> None:
        """On the event loop: an event, the error that ended the job, or None at its end."""
        if isinstance(item, (Prefill, Round)):
            self.stats.add(item)
        self.ended = not isinstance(item, (Prefill, Round))
        self.failed = isinstance(item, Exception)
        self.events.put_nowait(item)

    async def next(self) -> Event | None:
        item = await self.events.get()
        if isinstance(item, Exception):
            raise item
        return item

    async def next_round(self) -> Round | None:
        """After the Prefill, which the handler awaits first, every event is a Round."""
        event = await self.next()
        assert not isinstance(event, Prefill)
        return event

    def outcome(self) -> Outcome:
        """stop, length, cancelled (the client left, or the server stopped) or failed."""
        reason = self.stats.finish_reason
        if reason is None:
            # A client that leaves once its error has come (a stream read to its error event)
            # sets `cancel` too, maybe before the job is counted: the error decides.
            return "cancelled" if self.cancel.is_set() and not self.failed else "failed"
        # The loop's stop, length or cancelled, or context; a str until specrun.core types it.
        return "length" if reason == "context" else cast(Outcome, reason)

    def finish_reason(self) -> Outcome:
        """OpenAI's finish_reason. A generation cut short has nobody to tell but a client
        of a server that is stopping."""
        outcome = self.outcome()
        if outcome == "cancelled":
            raise shutting_down()
        return outcome


class Worker:
    """The engines' threads: `slots` generations at once, up to `queue` more waiting; each
    with the model its request names, loaded on demand (`ModelPool`)."""

    def __init__(
        self, pool: ModelPool, *, queue: int, defaults: SamplingParams, slots: int = 1
    ) -> None:
        self.pool = pool
        self.defaults = defaults  # the command line's sampling; each request starts from it
        self.slots = slots
        self.capacity = queue + slots  # the generations running and those waiting
        self.jobs: list[Job] = []  # admitted, in order
        self.running: list[Job] = []  # in the order they started
        self.stopping = False
        self.totals: Counter[Total] = Counter(dict.fromkeys(TOTALS, 0))
        self.speculation = Speculation()  # the drafts of every finished request
        # One thread a slot: requests start in the order they came, as threads free up.
        self._threads = ThreadPoolExecutor(slots, thread_name_prefix="specrun-generation")

    def submit(
        self,
        request: GenerationRequest,
        id_prefix: str,
        receive: Receive,
        tenant: str | None = None,
    ) -> list[Job]:
        """The request's generations, one for each answer it asks for (`n`), all admitted or
        none; a client that leaves cancels them all. `tenant`: the API key's (`BearerAuth`),
        None where the server has no keys: suffix drafts use only its own earlier answers."""
        if self.stopping:
            raise shutting_down()
        if request.n > self.capacity:
            raise ApiError(
                400,
                f"`n` is {request.n}, but this server runs {self.slots} generations at once and "
                f"queues {self.capacity - self.slots} more",
                param="n",
                code="invalid_value",
            )
        if len(self.jobs) + request.n > self.capacity:
            self.totals["rejected"] += 1
            raise ApiError(
                503,
                f"the server is busy: {len(self.jobs)} requests are ahead of this one; retry later",
                kind="server_error",
                code="queue_full",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        request_id = id_prefix + secrets.token_hex(12)
        jobs = [Job(request.choice(index), request_id, tenant) for index in range(request.n)]
        watcher = asyncio.create_task(self._watch(jobs, receive))
        tasks = []
        for job in jobs:
            self.jobs.append(job)
            self.totals["requests"] += 1
            job.task = asyncio.create_task(self._run(job))
            tasks.append(job.task)
        ended = asyncio.gather(*tasks, return_exceptions=True)
        ended.add_done_callback(lambda _: watcher.cancel())  # the client has no one left to stop
        return jobs

    async def _run(self, job: Job) -> None:
        """Wait for the job's turn in the generation threads, and generate."""
        loop = asyncio.get_running_loop()

        def hand(item: Event | Exception | None) -> None:
            loop.call_soon_threadsafe(job.deliver, item)

        def on_start() -> None:
            loop.call_soon_threadsafe(self.running.append, job)  # before anything it hands

        try:
            job.turn = self._threads.submit(self._generate, job, on_start, hand)
            await asyncio.wrap_future(job.turn)
        finally:
            if job in self.running:
                self.running.remove(job)
            self.jobs.remove(job)
            self._count(job)
            if not job.ended:  # it never ran: only a server that stops has someone to tell
                job.deliver(shutting_down())
            if self.pool.keep_alive is not None and not self.stopping:
                loop.call_later(self.pool.keep_alive, self._unload_idle)

    def _unload_idle(self) -> None:
        """Let go of idle models, in a generation thread (those in use stay)."""
        if not self.stopping:
            self._threads.submit(self.pool.unload_idle)

    async def _watch(self, jobs: list[Job], receive: Receive) -> None:
        """A client that leaves cancels its generations at the next round, or their places in
        the queue at once."""
        while (await receive())["type"] != "http.disconnect":
            pass  # the body was read already; nothing else arrives before the disconnect
        for job in jobs:
            job.cancel.set()
            if job.turn is not None:
                job.turn.cancel()  # a job still waiting leaves the queue; a running one goes on

    def _generate(
        self,
        job: Job,
        on_start: Callable[[], None],
        hand: Callable[[Event | Exception | None], None],
    ) -> None:
        """In a generation thread, the job's turn come: unless it was cancelled while it waited,
        say it runs, hand over its events, then None, or the error that ended it."""
        if job.cancel.is_set():
            return
        on_start()
        tokens: list[int] = []
        started = False
        try:
            with self._engine(job) as engine:
                job.engine = engine
                tokens = self._prompt(job, engine)
                max_tokens = (
                    engine.target.n_ctx
                    if job.request.max_tokens is None
                    else job.request.max_tokens
                )
                events = engine.stream(
                    tokens,
                    max_tokens=max_tokens,
                    stop=job.request.stop,
                    cancelled=job.cancel.is_set,
                    params=job.request.params,  # its own: the engine's stay the command line's
                    grammar=job.request.constraint(engine.target.chat_template),
                    logprobs=job.request.logprobs,
                    tenant=job.tenant,
                    shown=job.request.shown(engine.target.chat_template),
                )
                with closing(events):  # its slot is free the moment it ends, however it ends
                    for event in events:
                        started = True
                        hand(event)
        except SpecrunError as error:
            hand(self._failure(error, job, len(tokens), started))
        except Exception as error:  # a bug: the handler turns it into a 500 and logs it
            hand(error)
        else:
            hand(None)

    def _prompt(self, job: Job, engine: Engine) -> list[int]:
        """The request's tokens. Chat messages that leave the answer less than its room are
        fit by the server's --context-overflow (specrun.context_overflow): with truncate, the
        oldest exchanges go, and the answer's `specrun` figures say how many messages did."""
        request = job.request
        if not isinstance(request.prompt, list) or self.pool.overflow == "error":
            return request.tokens(engine)  # one longer than the context is refused: a 400
        n_ctx = engine.target.n_ctx
        try:
            kept, tokens, _ = fit(
                request.prompt,
                lambda messages: replace(request, prompt=messages).tokens(engine),
                n_ctx - answer_room(n_ctx, request.max_tokens),
                "truncate",
            )
        except ContextOverflow as error:
            raise ApiError(
                400,
                f"{error}: this server's context is {n_ctx} tokens",
                param=request.prompt_field,
                code="context_length_exceeded",
            ) from None
        job.stats.dropped_messages = len(request.prompt) - len(kept)
        return tokens

    @contextmanager
    def _engine(self, job: Job) -> Iterator[Engine]:
        """The model the job names, loaded now if it is not, and kept while the job runs; one
        that cannot load is the server's failure, in words."""
        try:
            engine = self.pool.acquire(job.request.model)
        except SpecrunError as error:
            raise ApiError(
                503,
                f"the model `{job.request.model}` could not be loaded: {error}",
                kind="server_error",
                code="model_not_loaded",
            ) from None
        try:
            yield engine
        finally:
            self.pool.release(job.request.model)

    def _failure(
        self, error: SpecrunError, job: Job, prompt_length: int, started: bool
    ) -> ApiError:
        """Before the prompt is in, an error is the request's; after, the server's, but for a
        grammar with no way on (the request's at any point)."""
        request = job.request
        if isinstance(error, ConstraintError) and request.grammar_param:
            return ApiError(400, str(error), param=request.grammar_param, code="invalid_value")
        if started:
            return ApiError(500, str(error), kind="server_error")
        if isinstance(error, OptionError):
            return bad_value(error)
        assert job.engine is not None, "a model that could not load is an ApiError already"
        n_ctx = job.engine.target.n_ctx
        if prompt_length >= n_ctx:  # the library's words name its options, which no client sets
            return ApiError(
                400,
                f"the prompt is {prompt_length} tokens, but this server's context is {n_ctx} "
                "tokens, for the prompt and the answer together: send a prompt shorter than "
                f"{n_ctx} tokens; the answer gets the rest, up to max_tokens",
                param=request.prompt_field,
                code="context_length_exceeded",
            )
        return ApiError(400, str(error), param=request.prompt_field)

    def _count(self, job: Job) -> None:
        self.totals[job.outcome()] += 1
        self.totals["prompt_tokens"] += job.stats.prompt_tokens
        self.totals["completion_tokens"] += job.stats.generated
        self.speculation.add(job.stats)

    def snapshot(self) -> dict[str, object]:
        """The running generations' live figures, the slots, the queue, and the totals since
        the start."""
        running = list(self.running)
        live = [
            {
                "id": job.id,
                "model": job.request.model,
                "recent_tokens_per_second": job.stats.recent_tokens_per_second,
                **job.stats.as_dict(),
            }
            for job in running
        ]
        # The first running request's model, else the default one where it is loaded.
        engine = next(
            (job.engine for job in running if job.engine is not None),
            self.pool.served[self.pool.default].engine,
        )
        invariance = engine and engine.target.invariance  # --reproducible: how the target decodes
        draft = engine and engine.draft
        return {
            "draft": draft and {"name": draft.name, "kind": draft.kind},
            "running": live,
            "slots": {"total": self.slots, "busy": len(running)},
            "queued": len(self.jobs) - len(running),
            "totals": dict(self.totals),
            "reproducible": invariance and invariance.mode,
            "models": self.pool.snapshot(),
        }

    async def stop(self) -> None:
        """Cancel every generation, running or waiting, and wait until the engines are free."""
        self.stopping = True
        for job in self.jobs:
            job.cancel.set()
        tasks = [job.task for job in list(self.jobs) if job.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """After the event loop: the engines may be closed once the generation threads are
        done."""
        for job in self.jobs:
            job.cancel.set()
        self._threads.shutdown(wait=True)
