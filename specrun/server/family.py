"""What an API family served beside OpenAI's brings: its routes over the same `Api` (engine,
slots, keys, Host and CORS rules), the paths they begin with, the bodies they take (for the
OpenAPI document) and its errors' shape; and where a request's tenant is kept."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel
from starlette.requests import Request
from starlette.routing import Route

from specrun.server.requests import ApiError, GenerationRequest
from specrun.server.worker import Job, Worker

TENANT = "specrun.tenant"  # the scope state's entry of a request's tenant, where keys are set


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
    """One API family: `routes` made over the server, all under `prefixes`, the body each
    takes by its path (`bodies`), whose errors (the middleware's refusals included)
    `error_body` writes."""

    name: str
    prefixes: tuple[str, ...]
    routes: Callable[[Service], list[Route]]
    bodies: Mapping[str, type[BaseModel]]
    error_body: ErrorBody


def tenant(request: Request) -> str | None:
    """The tenant of the request's API key (None: the server takes no keys)."""
    tenant: str | None = request.scope.get("state", {}).get(TENANT)
    return tenant


def openai_error(error: ApiError) -> dict[str, object]:
    return error.body()


def error_body_for(path: str, families: Sequence[Family]) -> ErrorBody:
    """The error shape of the family whose paths `path` begins with; OpenAI's elsewhere."""
    for family in families:
        if path.startswith(family.prefixes):
            return family.error_body
    return openai_error
