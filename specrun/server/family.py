"""What an API family served beside OpenAI's brings: its routes over the same `Api` (engine,
slots, keys, Host and CORS rules), the paths they begin with, and its errors' shape."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import Request
from starlette.routing import Route

from specrun.server.requests import ApiError, GenerationRequest
from specrun.server.worker import Job, Worker


class Service(Protocol):
    """What a family's routes use of the server (`app.Api`): the worker (its models, sampling
    defaults, slots), a request's body read against the deadline, and its generations started
    on the engine with its key's tenant."""

    @property
    def worker(self) -> Worker: ...

    async def body(self, request: Request) -> dict[str, Any]: ...

    async def start(
        self, request: Request, generation: GenerationRequest, id_prefix: str
    ) -> list[Job]: ...


ErrorBody = Callable[[ApiError], dict[str, object]]  # an error as a family's JSON body


@dataclass(frozen=True)
class Family:
    """One API family: `routes` made over the server, all under `prefixes`, whose errors (the
    middleware's refusals included) `error_body` writes."""

    name: str
    prefixes: tuple[str, ...]
    routes: Callable[[Service], list[Route]]
    error_body: ErrorBody


def openai_error(error: ApiError) -> dict[str, object]:
    return error.body()


def error_body_for(path: str, families: Sequence[Family]) -> ErrorBody:
    """The error shape of the family whose paths `path` begins with; OpenAI's elsewhere."""
    for family in families:
        if path.startswith(family.prefixes):
            return family.error_body
    return openai_error
