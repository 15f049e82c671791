"""What the TUI costs the generation it shows: `specrun run` beside `specrun chat`, twice.

Rows, interleaved, for one prompt, greedy, γ auto, the demo pair unless TARGET/DRAFT:
  CLI         `specrun run --json`
  TUI before  `specrun chat` in a pseudo-terminal with the front end of BEFORE (a git
              revision's tui/ and specrun/cli/chat.py, unpacked under /tmp; the engine
              and the rest of the CLI as checked out)
  TUI after   `specrun chat` in a pseudo-terminal, as checked out
A TUI run types the prompt, waits for the token limit's notice, types /stats and reads
the figures off the screen, as a person would (tests/terminal.py drives it; while the
answer streams it only collects the output, drawing it after: pyte, a terminal in pure
Python, would take more CPU than the TUI). Tokens/s
is the decode rate Stats reports in both front ends; the table gives the median and
the range of REPEAT runs, the mean γ that auto chose, and the CPU that Textual's
thread (the main thread of the process that draws the screen) took per second of
the answer.

    .venv/bin/python bench/tui_compare.py
Env: REPEAT (3), TOKENS (128), BEFORE (5fdb3d8^, the commit before the TUI's first fix;
several revisions, space-separated, give a row each), PROMPT (the built-in code
prompt), TARGET, DRAFT, THREADS (llama.cpp's default).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from terminal import Terminal  # noqa: E402

REPEAT = int(os.environ.get("REPEAT", 3))
TOKENS = int(os.environ.get("TOKENS", 128))
BEFORE = os.environ.get("BEFORE", "5fdb3d8^").split()
PROMPT = os.environ.get(
    "PROMPT", "Write a Python function that checks whether a number is prime. Include a docstring."
)
SPECRUN = Path(sys.executable).with_name("specrun")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# `specrun` with an older specrun/cli/chat.py (the first argument) in place of the checked-out one
WITH_CHAT_CLI = (
    "import importlib.util, sys; spec = importlib.util.spec_from_file_location('specrun.cli.chat', "
    "sys.argv.pop(1)); module = sys.modules[spec.name] = importlib.util.module_from_spec(spec); "
    "spec.loader.exec_module(module); from specrun.cli.app import entry; sys.exit(entry())"
)


def model_options() -> list[str]:
    options = ["--temp", "0", "--gamma", "auto", "-n", str(TOKENS)]
    for flag, name in (("--target", "TARGET"), ("--draft", "DRAFT"), ("--threads", "THREADS")):
        if name in os.environ:
            options += [flag, os.environ[name]]
    return options


Run = tuple[float, float, float | None]  # tokens/s, mean γ, Textual's CPU ms per second


def cli() -> Run:
    out = subprocess.run(
        [str(SPECRUN), "run", "--json", *model_options(), PROMPT],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = json.loads(out)
    assert figures["generated_tokens"] == TOKENS, "the prompt must run to the token limit"
    return figures["tokens_per_second"], figures["mean_gamma"], None


def tui(old_front_end: Path | None) -> Run:
    env = dict(os.environ, TERM="xterm-256color")
    command = [str(SPECRUN), "chat", *model_options()]
    if old_front_end:
        env["PYTHONPATH"] = str(old_front_end)  # its specrun_tui first
        command = [
            sys.executable,
            "-c",
            WITH_CHAT_CLI,
            str(old_front_end / "chat_cli.py"),
            *command[1:],
        ]
    with Terminal(command, size=(120, 50), env=env) as terminal:
        terminal.wait_for("Message, or /help", timeout=120)
        terminal.type(PROMPT)
        terminal.press("enter")
        textual = textual_thread(terminal.process.pid)
        start, cpu_start = time.monotonic(), cpu_seconds(textual)
        terminal.drain_until(
            "stopped at the token limit", timeout=600
        )  # pyte would take a core's share
        textual_ms = (cpu_seconds(textual) - cpu_start) / (time.monotonic() - start) * 1000
        terminal.type("/stats")
        terminal.press("enter")
        screen = terminal.wait_for("mean gamma", timeout=30)
        terminal.press("ctrl+q")
        terminal.wait_exit(30)
    generated = re.search(r"generated\s+(\d+) tokens, ([\d.]+) tok/s", screen)
    gamma = re.search(r"mean gamma\s+([\d.]+)", screen)
    assert generated and gamma and int(generated[1]) == TOKENS, screen
    return float(generated[2]), float(gamma[1]), textual_ms


def textual_thread(supervisor: int) -> int:
    """The process `specrun` forked to do the work: its main thread runs Textual's loop."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        stat = Path(f"/proc/{entry}/stat").read_text()
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == supervisor:
            return int(entry)
    raise AssertionError(f"`specrun` ({supervisor}) has no child")


def cpu_seconds(pid: int) -> float:
    """The CPU time of the main thread of `pid` (user and system)."""
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def unpack_front_end(revision: str, into: Path) -> Path:
    """`revision`'s TUI as an importable `specrun_tui` under `into`, and its chat_cli.py."""
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "tui", "specrun/cli/chat.py"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "tui").rename(into / "specrun_tui")
    (into / "specrun" / "chat_cli.py").rename(into / "chat_cli.py")
    return into


def main() -> None:
    rows = [
        "CLI",
        *(("TUI before",) if len(BEFORE) == 1 else (f"TUI at {rev}" for rev in BEFORE)),
        "TUI after",
    ]
    with tempfile.TemporaryDirectory(prefix="specrun-tui-before-") as scratch:
        runs = {"CLI": cli, "TUI after": lambda: tui(None)}
        for row, revision in zip(rows[1:-1], BEFORE):
            front_end = unpack_front_end(revision, Path(scratch) / revision.replace("/", "_"))
            runs[row] = lambda front_end=front_end: tui(front_end)
        results: dict[str, list[Run]] = {row: [] for row in rows}
        for repeat in range(REPEAT):
            for row in rows:
                results[row].append(runs[row]())
                rate, gamma, _ = results[row][-1]
                print(
                    f"# run {repeat + 1}/{REPEAT} {row}: {rate:.1f} tok/s, mean γ {gamma:.2f}",
                    file=sys.stderr,
                )
    cli_rate = statistics.median(rate for rate, _, _ in results["CLI"])
    print(
        f"{TOKENS} tokens, greedy, γ auto, {REPEAT} interleaved runs each; TUI before = {' '.join(BEFORE)}"
    )
    print("| | tokens/s (median) | range | × CLI | mean γ (auto) | Textual's thread, CPU ms/s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        rates = [rate for rate, _, _ in results[row]]
        gammas = [gamma for _, gamma, _ in results[row]]
        textual = [ms for _, _, ms in results[row] if ms is not None]
        median = statistics.median(rates)
        print(
            f"| {row} | {median:.1f} | {min(rates):.1f}–{max(rates):.1f} | {median / cli_rate:.2f} "
            f"| {statistics.median(gammas):.2f} ({min(gammas):.2f}–{max(gammas):.2f}) "
            f"| {f'{statistics.median(textual):.0f}' if textual else '–'} |"
        )


if __name__ == "__main__":
    main()
