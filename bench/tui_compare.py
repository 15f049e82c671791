"""What the TUI costs the generation it shows: `specrun run` beside `specrun chat`, twice.

Rows, interleaved, for one prompt, greedy, γ auto, the demo pair unless --target/--draft:
  CLI         `specrun run --json`
  TUI before  `specrun chat` in a pseudo-terminal with the front end of --before (a git
              revision's tui/ and specrun/cli/chat.py, unpacked under /tmp; the engine
              and the rest of the CLI as checked out)
  TUI after   `specrun chat` in a pseudo-terminal, as checked out
A TUI run types the prompt, waits for the token limit's notice, types /stats and reads
the figures off the screen, as a person would (tests/support/terminal.py drives it; while the
answer streams it only collects the output, drawing it after: pyte, a terminal in pure
Python, would take more CPU than the TUI). Tokens/s
is the decode rate Stats reports in both front ends; the table gives the median and
the range of --repeat runs, the mean γ that auto chose, and the CPU that Textual's
thread (the main thread of the process that draws the screen) took per second of
the answer.

Run it as a module from the repository root, so that it imports tests/support/terminal.py:

    .venv/bin/python -m bench.tui_compare
    .venv/bin/python -m bench.tui_compare --repeat 3 --before HEAD~3 HEAD
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.terminal import Terminal

ROOT = Path(__file__).resolve().parent.parent
SPECRUN = Path(sys.executable).with_name("specrun")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# An older front end beside the checked-out engine: the unpacked revision's folder (the first
# argument) goes first on specrun.cli's search path, so `specrun.cli.chat` is its chat.py, and
# first on PYTHONPATH (set by tui()), so `specrun_tui` is its tui/; all else is as checked out.
WITH_OLD_FRONT_END = (
    "import sys, specrun.cli; specrun.cli.__path__.insert(0, sys.argv.pop(1)); "
    "from specrun.__main__ import entry; entry()"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each row (3)")
    parser.add_argument(
        "--tokens", type=int, default=128, help="the token limit; every run must reach it (128)"
    )
    parser.add_argument(
        "--before",
        nargs="+",
        default=["HEAD"],
        metavar="REVISION",
        help="git revisions whose front end runs beside the engine as checked out, a row each "
        "(HEAD: the last commit against the working tree); revisions before the sub-packages "
        "(cbbc2aa) cannot run against today's engine",
    )
    parser.add_argument(
        "--prompt",
        default="Write a Python function that checks whether a number is prime. "
        "Include a docstring.",
        help="the prompt (default: a code prompt, %(default)r)",
    )
    parser.add_argument("--target", help="the target GGUF (default: specrun's, the demo pair)")
    parser.add_argument("--draft", help="the draft GGUF (default: specrun's, the demo pair)")
    parser.add_argument("--threads", type=int, help="llama.cpp's threads (default: its own)")
    return parser.parse_args(argv)


def model_options(args: argparse.Namespace) -> list[str]:
    options = ["--temp", "0", "--gamma", "auto", "-n", str(args.tokens)]
    for flag, value in (("--target", args.target), ("--draft", args.draft)):
        if value:
            options += [flag, value]
    if args.threads is not None:
        options += ["--threads", str(args.threads)]
    return options


Run = tuple[float, float, float | None]  # tokens/s, mean γ, Textual's CPU ms per second


def cli(args: argparse.Namespace) -> Run:
    out = subprocess.run(
        [str(SPECRUN), "run", "--json", *model_options(args), args.prompt],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = json.loads(out)
    assert figures["generated_tokens"] == args.tokens, "the prompt must run to the token limit"
    return figures["tokens_per_second"], figures["mean_gamma"], None


def tui(args: argparse.Namespace, old_front_end: Path | None) -> Run:
    env = dict(os.environ, TERM="xterm-256color")
    command = [str(SPECRUN), "chat", *model_options(args)]
    if old_front_end:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(old_front_end), os.environ.get("PYTHONPATH")])
        )
        command = [sys.executable, "-c", WITH_OLD_FRONT_END, str(old_front_end), *command[1:]]
    with Terminal(command, size=(120, 50), env=env) as terminal:
        terminal.wait_for("Message, or /help", timeout=120)
        terminal.type(args.prompt)
        terminal.press("enter")
        textual = textual_thread(terminal.process.pid)
        start, cpu_start = time.monotonic(), cpu_seconds(textual)
        # Only collected while the answer streams: pyte would take a core's share.
        terminal.drain_until("stopped at the token limit", timeout=600)
        textual_ms = (cpu_seconds(textual) - cpu_start) / (time.monotonic() - start) * 1000
        terminal.type("/stats")
        terminal.press("enter")
        screen = terminal.wait_for("mean gamma", timeout=30)
        terminal.press("ctrl+q")
        terminal.wait_exit(30)
    generated = re.search(r"generated\s+(\d+) tokens, ([\d.]+) tok/s", screen)
    gamma = re.search(r"mean gamma\s+([\d.]+)", screen)
    assert generated and gamma and int(generated[1]) == args.tokens, screen
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
    """`revision`'s front end under `into`: its specrun_tui package as `specrun_tui/`, and its
    specrun/cli/chat.py as `chat.py` (see WITH_OLD_FRONT_END)."""
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "tui", "specrun/cli/chat.py"],
        capture_output=True,
    )
    if archive.returncode:
        raise SystemExit(
            f"--before {revision}: git archive failed: {archive.stderr.decode().strip()}\n"
            "(the front end has been tui/ and specrun/cli/chat.py since cbbc2aa; an earlier "
            "revision's does not import against this engine)"
        )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    tui = into / "tui"
    package = tui / "specrun_tui"  # tui/ holds the package since 02d8ae6; before, it was one
    (package if package.is_dir() else tui).rename(into / "specrun_tui")
    if tui.is_dir():
        tui.rmdir()
    (into / "specrun" / "cli" / "chat.py").rename(into / "chat.py")
    # No `specrun` folder may stay on PYTHONPATH: it would shadow the installed package.
    (into / "specrun" / "cli").rmdir()
    (into / "specrun").rmdir()
    return into


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    before, repeat = args.before, args.repeat
    rows = [
        "CLI",
        *(("TUI before",) if len(before) == 1 else (f"TUI at {rev}" for rev in before)),
        "TUI after",
    ]
    with tempfile.TemporaryDirectory(prefix="specrun-tui-before-") as scratch:
        runs = {"CLI": lambda: cli(args), "TUI after": lambda: tui(args, None)}
        for row, revision in zip(rows[1:-1], before):
            front_end = unpack_front_end(revision, Path(scratch) / revision.replace("/", "_"))
            runs[row] = lambda front_end=front_end: tui(args, front_end)
        results: dict[str, list[Run]] = {row: [] for row in rows}
        for run in range(repeat):
            for row in rows:
                results[row].append(runs[row]())
                rate, gamma, _ = results[row][-1]
                print(
                    f"# run {run + 1}/{repeat} {row}: {rate:.1f} tok/s, mean γ {gamma:.2f}",
                    file=sys.stderr,
                )
    cli_rate = statistics.median(rate for rate, _, _ in results["CLI"])
    print(
        f"{args.tokens} tokens, greedy, γ auto, {repeat} interleaved runs each; "
        f"TUI before = {' '.join(before)}"
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
