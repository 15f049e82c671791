"""Hostile requests to `specrun serve` (issue 33): the real command on a free loopback port, spoken
to with httpx and raw sockets. Whatever the request, the answer is an error in OpenAI's shape
with the right status, the server serves on, and its log holds no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FAIL_SAFE = 60  # seconds a socket or a command may wait: a limit on a broken test


# --- the command line ---------------------------------------------------------------------------


def serve_fails(tiny_target: Path, *options: str, env: dict[str, str] | None = None) -> str:
    """`specrun serve` that must refuse to start: its one line of stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "serve", "-t", str(tiny_target), "--port", "0", *options],
        capture_output=True,
        text=True,
        timeout=FAIL_SAFE,
        env={**os.environ, **(env or {})},
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "options, env",
    [
        (["--api-key", ""], {}),
        ([], {"SPECRUN_API_KEY": ""}),
        (["--api-key", "  "], {}),
    ],
    ids=["flag", "environment", "blank"],
)
def test_an_empty_api_key_is_refused_however_it_is_given(tiny_target, options, env):
    line = serve_fails(tiny_target, *options, env=env)
    assert line == "specrun: error: --api-key (or $SPECRUN_API_KEY) is empty"
