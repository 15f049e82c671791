"""Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, ...) over the same engine and slots."""

from __future__ import annotations

from starlette.routing import Route

from specrun.server.family import Family, Service
from specrun.server.requests import ApiError


def routes(server: Service) -> list[Route]:
    return []


def error_body(error: ApiError) -> dict[str, object]:
    """Ollama's error shape: {"error": message}."""
    return {"error": str(error)}


FAMILY = Family("ollama", ("/api/",), routes, error_body)
