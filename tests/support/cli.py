"""`specrun` as a user runs it: a subprocess with stdin, stdout and stderr captured."""

from __future__ import annotations

import os
import subprocess
import sys


def specrun(
    *args: str, stdin: str | None = None, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`specrun ARGS`; `env` adds to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "specrun", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
