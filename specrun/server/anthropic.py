"""Anthropic's Messages API (`POST /v1/messages`) over the same engine and slots."""

from __future__ import annotations

from starlette.routing import Route

from specrun.server.family import Family, Service
from specrun.server.requests import ApiError


def routes(server: Service) -> list[Route]:
    return []


def error_body(error: ApiError) -> dict[str, object]:
    """Anthropic's error shape: {"type": "error", "error": {"type", "message"}}."""
    return {"type": "error", "error": {"type": error.kind, "message": str(error)}}


FAMILY = Family("anthropic", ("/v1/messages",), routes, error_body)
