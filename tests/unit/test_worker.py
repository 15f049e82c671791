"""The server's turn: generations start in the order their requests came, as many at once as
the server has slots, and a request that leaves while it waits gives up its place at once.
The worker is real; its model is a stand-in whose generations end when the test says."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

from specrun.core.loop import Event, Prefill, Round
from specrun.core.sampling import SamplingParams
from specrun.server.pool import ModelPool, Served
from specrun.server.requests import GenerationRequest
from specrun.server.worker import Worker

DEADLINE = 10.0  # seconds any wait here may take


class Target:
    n_ctx = 64
    chat_template = None
    invariance = None


class HeldEngine:
    """What the worker asks of an engine. Each generation says it started, then waits for the
    test to let it finish."""

    def __init__(self) -> None:
        self.target, self.draft = Target(), None
        self.started: list[str] = []
        self.finish = {name: threading.Event() for name in "ABCD"}

    def prompt(self, text: str, raw: bool = False) -> list[int]:
        return [ord(text)]

    def stream(self, tokens: list[int], **settings: Any) -> Iterator[Event]:
        name = chr(tokens[0])
        self.started.append(name)
        yield Prefill(1, 1, 0.0)
        assert self.finish[name].wait(DEADLINE), f"{name} was never let finish"
        yield Round((1,), (False,), (), 0, 0, 0, 0.0, 0.0, 0.0, finish_reason="stop")


def request(name: str) -> GenerationRequest:
    return GenerationRequest(name, SamplingParams(), "held", 4, (), stream=False)


def client() -> tuple[Callable[[], Any], asyncio.Event]:
    """An ASGI `receive` whose client leaves when the event is set."""
    left = asyncio.Event()

    async def receive() -> dict[str, str]:
        await left.wait()
        return {"type": "http.disconnect"}

    return receive, left


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), DEADLINE)


def test_requests_start_in_order_and_one_that_leaves_while_waiting_gives_up_its_place():
    engine = HeldEngine()
    worker = Worker(
        ModelPool([Served("held", lambda: engine, engine=engine)]),  # type: ignore[arg-type, return-value]
        queue=3,
        defaults=SamplingParams(),
        slots=1,
    )

    async def serve() -> None:
        clients = {name: client() for name in "ABCD"}
        a, b, c, d = (
            worker.submit(request(name), "x-", receive)[0] for name, (receive, _) in clients.items()
        )
        await until(lambda: worker.running == [a])
        assert worker.snapshot()["queued"] == 3 and engine.started == ["A"]
        clients["B"][1].set()  # B waits behind A: it leaves the queue at once, never started
        await until(lambda: b not in worker.jobs)
        assert worker.totals["cancelled"] == 1 and worker.snapshot()["queued"] == 2
        engine.finish["A"].set()
        await until(lambda: worker.running == [c])  # C's turn before D's, once A's slot is free
        engine.finish["C"].set()
        await until(lambda: worker.running == [d])
        engine.finish["D"].set()
        await asyncio.wait_for(asyncio.gather(a.task, c.task, d.task), DEADLINE)

    try:
        asyncio.run(serve())
    finally:
        worker.close()
    assert engine.started == ["A", "C", "D"]
    assert worker.totals["stop"] == 3 and worker.totals["requests"] == 4
