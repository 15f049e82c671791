"""What the TUI costs the generation it shows: `specrun run` beside `specrun chat`, twice.

Rows, interleaved, for one prompt, greedy, γ auto, the demo pair unless TARGET/DRAFT:
  CLI         `specrun run --json`
  TUI before  `specrun chat` in a pseudo-terminal with the TUI of BEFORE (a git revision,
              unpacked under /tmp and put first on PYTHONPATH; engine and CLI as checked out)
  TUI after   `specrun chat` in a pseudo-terminal, as checked out
A TUI run types the prompt, waits for the token limit's notice, types /stats and reads
the figures off the screen, as a person would (tests/terminal.py drives it). Tokens/s
is the decode rate Stats reports in both front ends; the table gives the median and
the range of REPEAT runs, and the mean γ that auto chose.

    .venv/bin/python bench/tui_compare.py
Env: REPEAT (3), TOKENS (128), BEFORE (5fdb3d8^, the commit before the TUI's fix),
PROMPT (the built-in code prompt), TARGET, DRAFT, THREADS (llama.cpp's default).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from terminal import Terminal  # noqa: E402

REPEAT = int(os.environ.get("REPEAT", 3))
TOKENS = int(os.environ.get("TOKENS", 128))
BEFORE = os.environ.get("BEFORE", "5fdb3d8^")
PROMPT = os.environ.get("PROMPT", "Write a Python function that checks whether a number is prime. Include a docstring.")
SPECRUN = Path(sys.executable).with_name("specrun")
ROWS = ["CLI", "TUI before", "TUI after"]


def model_options() -> list[str]:
    options = ["--temp", "0", "--gamma", "auto", "-n", str(TOKENS)]
    for flag, name in (("--target", "TARGET"), ("--draft", "DRAFT"), ("--threads", "THREADS")):
        if name in os.environ:
            options += [flag, os.environ[name]]
    return options


def cli() -> tuple[float, float]:
    out = subprocess.run([str(SPECRUN), "run", "--json", *model_options(), PROMPT],
                         capture_output=True, text=True, check=True).stdout
    figures = json.loads(out)
    assert figures["generated_tokens"] == TOKENS, "the prompt must run to the token limit"
    return figures["tokens_per_second"], figures["mean_gamma"]


def tui(pythonpath: str | None) -> tuple[float, float]:
    env = dict(os.environ, TERM="xterm-256color")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with Terminal([str(SPECRUN), "chat", *model_options()], size=(120, 50), env=env) as terminal:
        terminal.wait_for("Message, or /help", timeout=120)
        terminal.type(PROMPT)
        terminal.press("enter")
        terminal.wait_for("stopped at the token limit", timeout=600)
        terminal.type("/stats")
        terminal.press("enter")
        screen = terminal.wait_for("mean gamma", timeout=30)
        terminal.press("ctrl+q")
        terminal.wait_exit(30)
    generated = re.search(r"generated\s+(\d+) tokens, ([\d.]+) tok/s", screen)
    gamma = re.search(r"mean gamma\s+([\d.]+)", screen)
    assert generated and gamma and int(generated[1]) == TOKENS, screen
    return float(generated[2]), float(gamma[1])


def unpack_tui(revision: str, into: Path) -> str:
    """The TUI package of `revision` as an importable `specrun_tui` under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "tui"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "tui").rename(into / "specrun_tui")
    return str(into)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="specrun-tui-before-") as before:
        old_tui = unpack_tui(BEFORE, Path(before))
        runs = {"CLI": cli, "TUI before": lambda: tui(old_tui), "TUI after": lambda: tui(None)}
        results: dict[str, list[tuple[float, float]]] = {row: [] for row in ROWS}
        for repeat in range(REPEAT):
            for row in ROWS:
                results[row].append(runs[row]())
                rate, gamma = results[row][-1]
                print(f"# run {repeat + 1}/{REPEAT} {row}: {rate:.1f} tok/s, mean γ {gamma:.2f}", file=sys.stderr)
    cli_rate = statistics.median(rate for rate, _ in results["CLI"])
    print(f"{TOKENS} tokens, greedy, γ auto, {REPEAT} interleaved runs each; TUI before = {BEFORE}")
    print("| | tokens/s (median) | range | × CLI | mean γ (auto) |")
    print("|---|---|---|---|---|")
    for row in ROWS:
        rates = [rate for rate, _ in results[row]]
        gammas = [gamma for _, gamma in results[row]]
        median = statistics.median(rates)
        print(f"| {row} | {median:.1f} | {min(rates):.1f}–{max(rates):.1f} | {median / cli_rate:.2f} "
              f"| {statistics.median(gammas):.2f} ({min(gammas):.2f}–{max(gammas):.2f}) |")


if __name__ == "__main__":
    main()
