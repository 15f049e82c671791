"""`specrun ps`: what a running `specrun serve` has loaded and is doing, read from its
/v1/models and /v1/stats (as `ollama ps` asks its server). A server that does not answer, or
answers as no specrun server would, is one line."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

import typer

from specrun.cli.serve import API_KEY_ENV
from specrun.errors import SpecrunError

DEFAULT_URL = "http://127.0.0.1:8080"  # serve's default --host and --port
TIMEOUT_SECONDS = 5.0


class NoServer(SpecrunError):
    """No specrun server answered at the address."""


def ps(
    url: str = typer.Option(
        DEFAULT_URL,
        "--url",
        metavar="URL",
        help="The server's address (its /v1 may be left out).",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        metavar="KEY",
        help=f"The server's API key, if it wants one (default: ${API_KEY_ENV}).",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the server's /v1/models and /v1/stats as one JSON object."
    ),
) -> None:
    """What a running `specrun serve` has loaded: its models, draft, slots and queue."""
    base = url.rstrip("/").removesuffix("/v1")
    key = api_key or os.environ.get(API_KEY_ENV) or None
    models = _get(f"{base}/v1/models", key)
    stats = _get(f"{base}/v1/stats", key)
    if as_json:
        print(json.dumps({"models": models.get("data", []), "stats": stats}, indent=2))
        return
    print("\n".join(render(models, stats)))


def render(models: dict[str, Any], stats: dict[str, Any]) -> list[str]:
    """The models as a table (the default marked), then one line of the server's state."""
    default = stats.get("model")
    rows = [("MODEL", "LOADED", "DEFAULT")] + [
        (
            str(model.get("id")),
            "yes" if model.get("loaded") else "-",
            "yes" if model.get("id") == default else "-",
        )
        for model in models.get("data", [])
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    draft = stats.get("draft")
    slots, totals = stats.get("slots") or {}, stats.get("totals") or {}
    state = [
        f"draft {draft['name']} ({draft['kind']})" if draft else "no draft",
        f"slots {slots.get('busy', 0)}/{slots.get('total', '?')} busy",
        f"{stats.get('queued', 0)} queued",
        f"{totals.get('requests', 0)} requests, {totals.get('completion_tokens', 0)} tokens "
        "generated",
    ]
    lines.append(", ".join(state))
    for job in stats.get("running") or []:
        speed = job.get("recent_tokens_per_second")
        lines.append(
            f"  {job.get('id')}: {job.get('model')}, {job.get('generated_tokens', 0)} tokens"
            + (f", {speed:.1f} tok/s" if isinstance(speed, int | float) else "")
        )
    return lines


def _get(url: str, key: str | None) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
            body = answer.read()
    except urllib.error.HTTPError as error:
        hint = f" (--api-key or ${API_KEY_ENV})" if error.code == 401 else ""
        raise NoServer(f"{url} answered HTTP {error.code}{hint}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise NoServer(
            f"no server answers at {url}: {reason} (start one with `specrun serve`, or give "
            "its address with --url)"
        ) from None
    except ValueError as error:  # not an http(s) URL
        raise NoServer(f"--url {url}: {error}") from None
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise NoServer(f"{url} did not answer as a specrun server does (no JSON object)")
    return data
