"""OpenAI's Responses API (`POST /v1/responses`) over the same engine and slots."""

from __future__ import annotations

from starlette.routing import Route

from specrun.server.family import Family, Service, openai_error


def routes(server: Service) -> list[Route]:
    return []


FAMILY = Family("responses", ("/v1/responses",), routes, openai_error)
