"""Signals and the processes specrun starts (issue 33): the real command in subprocesses and
pseudo-terminals, signals sent as a terminal, `kill`, `nohup` or a shell send them.

- Ctrl-C in the TUI stops the answer, as everywhere in specrun.
- `bench --plot` checks its format before it runs; a plot that fails leaves the table.

Linux only where a test reads /proc (the signal masks, a process's children, what it waits
on): the waits poll it with a generous limit, a fail-safe, never a measurement.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.terminal import Terminal

LIMIT = 60.0  # seconds: a fail-safe for what is waited on
COUNTING = "1, 2, 3, 4, 5, 6,"  # the demo model counts on for thousands of tokens
ONE_LONG_LINE = "Write the numbers from 1 to 300 on one line, separated by commas."
PROMPT_BOX = "Message, or /help"
CTRL_C = "\x03"  # a key to the TUI, which reads the terminal raw


def start(
    *args: str, stdin: int = subprocess.DEVNULL, ignoring: int | None = None
) -> subprocess.Popen[bytes]:
    """`specrun ARGS` in a session of its own (a group to signal, as a terminal does);
    `ignoring`: started with that signal ignored, as `nohup` or a shell's background job is."""

    def ignore() -> None:
        if ignoring is not None:
            signal.signal(ignoring, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "specrun", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=ignore,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def lines(data: bytes) -> list[str]:
    return data.decode().splitlines()


def test_piped_chat_stopped_mid_reply_ends_the_reply_with_a_newline(demo_pair):
    process = start(
        "chat",
        "-t",
        str(demo_pair[0]),
        "-d",
        "none",
        "--temp",
        "0",
        "-n",
        "3000",
        "--threads",
        "1",
        stdin=subprocess.PIPE,
    )
    process.stdin.write(f"{ONE_LONG_LINE}\n".encode())
    process.stdin.flush()  # and left open: the next turn never comes
    first = process.stdout.read(8)  # the reply is under way
    process.send_signal(signal.SIGTERM)
    rest, stderr = process.stdout.read(), process.stderr.read()
    code = process.wait(timeout=LIMIT)
    process.stdin.close()
    assert code == 128 + signal.SIGTERM and lines(stderr)[-1] == "specrun: interrupted"
    reply = first + rest
    assert reply.endswith(b"\n") and not reply.endswith(b"\n\n")  # was: no newline at all


# --- the TUI ----------------------------------------------------------------------------------


def chat_terminal(target: Path, *options: str) -> Terminal:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    return Terminal(
        [sys.executable, "-m", "specrun", "chat", "-t", str(target), "--temp", "0", *options],
        size=(120, 40),
        env=env,
    )


def test_ctrl_c_in_the_tui_stops_the_answer_and_twice_with_none_quits(demo_pair):
    target, draft = demo_pair
    with chat_terminal(target, "-d", str(draft), "-n", "900") as terminal:
        terminal.wait_for(PROMPT_BOX, timeout=LIMIT)
        terminal.type(f"{ONE_LONG_LINE}\r")
        terminal.wait_for(re.compile(r"tok/s now\s+\d").search, timeout=LIMIT)  # under way
        terminal.type(CTRL_C)
        # Was: the text box's copy, which with nothing selected did nothing.
        terminal.wait_for(re.compile(r"^\s*stopped\s*(│|$)", re.M).search, timeout=LIMIT)
        terminal.type(CTRL_C)
        terminal.wait_for("Ctrl-C again quits")
        terminal.type(CTRL_C)
        assert terminal.wait_exit() == 0


# --- bench --plot -----------------------------------------------------------------------------


def test_bench_checks_the_plot_format_before_it_runs(tiny_target, tmp_path):
    for name, problem in [
        ("plot.xyz", "matplotlib cannot write .xyz files"),
        ("plot", "the name has no extension"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "specrun", "bench", "-t", str(tiny_target), "-r", "1"]
            + ["--plot", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=LIMIT,
        )
        assert result.returncode == 2 and result.stdout == ""  # was: the whole bench, then 1
        (line,) = result.stderr.splitlines()  # one line: no "bench:" progress, nothing ran
        assert line.startswith(
            f"specrun: error: --plot {tmp_path / name}: {problem}; name a file ending in one of "
        )
        assert ".pdf, " in line and ".png, " in line and ".svg, " in line
    assert list(tmp_path.iterdir()) == []


def test_a_plot_that_fails_at_the_end_leaves_the_table(tiny_target, tmp_path):
    if shutil.which("xelatex"):
        pytest.skip("xelatex is installed, so matplotlib draws the pgf plot")
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "bench", "-t", str(tiny_target), "-r", "1", "-n", "4"]
        + ["--modes", "plain", "--threads", "1", "--plot", str(tmp_path / "plot.pgf")],
        capture_output=True,
        text=True,
        timeout=LIMIT,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cost curve" in result.stdout  # the table, printed all the same
    assert result.stderr.splitlines()[-1].startswith(
        "specrun: error: --plot: matplotlib could not draw the plot: "
    )
    assert list(tmp_path.iterdir()) == []  # no partial file left behind
