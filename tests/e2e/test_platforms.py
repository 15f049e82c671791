"""specrun where POSIX names are missing, as on Windows: simulated on this machine by a
Python whose `signal` has no SIGHUP, SIGBUS, SIGKILL, sigwaitinfo or pthread_sigmask and
whose `os` has no fork or getloadavg. It catches a POSIX-only name used at import time or
on the way through `--help` and a run (no supervisor without fork); not what differs in
Windows itself (its console's Ctrl-C, its paths, its llama.cpp build)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SHIM = """
import os, signal, sys
for name in ("SIGHUP", "SIGBUS", "SIGKILL", "sigwaitinfo", "pthread_sigmask"):
    if hasattr(signal, name):
        delattr(signal, name)
for name in ("fork", "getloadavg"):
    if hasattr(os, name):
        delattr(os, name)
sys.argv = ["specrun", *sys.argv[1:]]
from specrun.__main__ import entry
entry()
"""


def without_posix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SHIM, *args], capture_output=True, text=True, timeout=120
    )


def test_help_and_a_run_without_posix_only_names(tiny_target: Path):
    shown = without_posix("--help")
    assert shown.returncode == 0 and "Usage" in shown.stdout, shown.stderr
    ran = without_posix(
        "run",
        "-t",
        str(tiny_target),
        "--threads",
        "1",
        "-n",
        "4",
        "--temp",
        "0",
        "--json",
        "the cat",
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["generated_tokens"] == 4
