"""`specrun` as a user runs it: a subprocess with stdin, stdout and stderr captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import default_signals


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


def one_error(result: subprocess.CompletedProcess) -> str:
    """The message of the one `specrun: error:` line, checked to be all there is (exit 1)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert len(lines) == 1 and lines[0].startswith("specrun: error: "), lines
    return lines[0].removeprefix("specrun: error: ")


COUNTING = "1, 2, 3, 4, 5, 6,"  # the demo model counts on for thousands of tokens


def counting_run(target: Path, *options: str, tokens: int = 3000) -> list[str]:
    """`specrun`'s arguments for a greedy count on `target`: a long answer whatever the
    model, for signals, closed pipes and deadlines to meet."""
    return ["run", "-t", str(target), "--raw", "--temp", "0", "-n", str(tokens), *options, COUNTING]


def long_generation(
    target: Path, *options: str, text: bool = False, cwd: Path | None = None
) -> subprocess.Popen:
    """`specrun run` on a greedy count that goes on for thousands of tokens (seconds on the
    real model), its output piped and unbuffered, for signals and closed pipes to meet."""
    return subprocess.Popen(
        [sys.executable, "-m", "specrun", *counting_run(target, *options)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        text=text,
        cwd=cwd,
        preexec_fn=default_signals,  # the tests stop it with a signal
    )
