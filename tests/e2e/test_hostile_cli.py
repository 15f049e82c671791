"""Hostile input on the command line, and stop signals in every window (issue 49).

- Typed numbers are ASCII digits: `٣` (Arabic-Indic three) is not read as 3, whether Typer
  reads the option (-n, --threads, --port) or specrun does (-g, --rpc, --logit-bias, --gammas).
- A comma-separated option refuses an empty item instead of leaving it out, and --draft the
  same draft twice: one line, exit 2, never a traceback.
- `run --json` writes its object whenever a stop signal comes once the policy is in (was:
  none in the first 0.9 s), and the first stop signal decides the exit status (was: 130 for
  SIGTERM then SIGINT).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.test_cli import assert_one_line_error
from tests.e2e.test_faults_signals import policy_installed, signals_in, start, wait_until
from tests.support.cli import counting_run, specrun
from tests.support.processes import default_signals, finish, within

ARABIC_THREE, ARABIC_PORT = "٣", "٨٠٨٠"  # 3 and 8080 in Arabic-Indic digits


def run_args(target, *options: str) -> list[str]:
    return ["run", "-t", str(target), "--threads", "1", "-n", "2", *options, "hi"]


@pytest.mark.parametrize(
    "options, expected",
    [
        (["-n", ARABIC_THREE], "--max-tokens"),
        (["--threads", ARABIC_THREE], "--threads"),
        (["--seed", ARABIC_THREE], "--seed"),
        (
            ["-g", ARABIC_THREE],
            f"--gamma must be auto, heuristic or a number, got '{ARABIC_THREE}'",
        ),
        (["--rpc", f"127.0.0.1:{ARABIC_PORT}"], "--rpc takes HOST:PORT"),  # was: port 8080
        (["--logit-bias", f"{ARABIC_THREE}+1"], "--logit-bias takes"),  # was: token 3
        (["--logit-bias", f"3+{ARABIC_THREE}"], "--logit-bias takes"),
        (["-d", ","], "--draft has an empty item: ','"),  # was: a traceback (IndexError)
        (["-d", "lookup,"], "--draft has an empty item"),
        (["-d", "lookup, ,mtp"], "--draft has an empty item"),
        (["-d", "lookup,lookup"], "--draft names lookup twice"),  # was: accepted
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_run_refuses_hostile_options_in_one_line(tiny_target, options, expected):
    assert_one_line_error(specrun(*run_args(tiny_target, *options)), expected, code=2)


def test_the_same_draft_file_twice_is_refused(tiny_target, tiny_draft):
    drafts = f"{tiny_draft},lookup,{tiny_draft.parent}/./{tiny_draft.name}"
    result = specrun(*run_args(tiny_target, "-d", drafts))
    assert_one_line_error(result, f"--draft names {tiny_draft.name} twice", code=2)


@pytest.mark.parametrize(
    "options, expected",
    [
        (["--modes", ""], "--modes is empty"),  # was: every mode ran
        (["--modes", "plain,"], "--modes has an empty item"),
        (["--gammas", "1,,2"], "--gammas has an empty item"),  # was: read as 1,2
        (["--gammas", ARABIC_THREE], "--gammas must be numbers"),
        (["--gammas", " "], "--gammas is empty"),
    ],
)
def test_bench_refuses_empty_lists_and_other_digits(tiny_target, options, expected):
    result = specrun("bench", "-t", str(tiny_target), "-r", "1", "-n", "2", *options)
    assert_one_line_error(result, expected, code=2)


@pytest.mark.parametrize("layers", [f"2,{ARABIC_THREE},4", "2,3", "2,,4"])
def test_heads_train_refuses_layer_numbers_it_cannot_read(tiny_target, tmp_path, layers):
    result = specrun(
        "heads", "train", str(tiny_target), "-o", str(tmp_path / "h.gguf"), "--layers", layers
    )
    assert_one_line_error(result, "--layers takes three layer numbers", code=2)


@pytest.mark.parametrize(
    "command, expected",
    [
        (["serve", "--port", ARABIC_PORT], "--port"),
        (["rpc-server", "--port", ARABIC_PORT], "--port"),
        (["rpc-server", "--device", ","], "--device has an empty item"),  # was: every device
    ],
)
def test_servers_refuse_hostile_options(tiny_target, command, expected):
    assert_one_line_error(specrun(*command), expected, code=2)


def test_serve_refuses_a_model_with_an_empty_draft(tiny_target):
    result = specrun("serve", "-t", str(tiny_target), "--model", f"{tiny_target}+")
    assert_one_line_error(result, "--model takes TARGET or TARGET+DRAFT", code=2)


def taken(pid: int, signum: int) -> bool:
    """The process has dequeued `signum`: it is pending neither for it nor for its thread."""
    return signum not in signals_in(pid, "ShdPnd") | signals_in(pid, "SigPnd")


@pytest.mark.parametrize("to_every_process", [False, True], ids=["kill", "killpg"])
@pytest.mark.parametrize("delay", [0.0, 0.5, 1.5], ids=["starting", "loading", "generating"])
def test_the_first_stop_signal_decides_the_exit_status(demo_pair, delay, to_every_process):
    """SIGTERM, then SIGINT once specrun took the first: 143 and the JSON object. Two signals
    that reach the worker in one native call are handled in the order of their numbers, so
    the supervisor, which saw them in order, reports the first."""
    process = start(*counting_run(demo_pair[0], "--threads", "1", "--json"))
    wait_until(policy_installed(process.pid), "the policy is in")
    time.sleep(delay)
    send = os.killpg if to_every_process else os.kill
    send(process.pid, signal.SIGTERM)
    wait_until(lambda: taken(process.pid, signal.SIGTERM), "specrun took SIGTERM")
    send(process.pid, signal.SIGINT)
    stdout, stderr, code = finish(process)
    assert code == 128 + signal.SIGTERM, (delay, stderr)  # was: 130
    assert json.loads(stdout)["finish_reason"] == "interrupted", stdout


ARRIVING_DURING_A_NATIVE_CALL = """
import hashlib, time
from specrun.system import interrupts
from tests.support.processes import default_signals, within
interrupts.install()
interrupts.take()
start = time.perf_counter()
hashlib.pbkdf2_hmac("sha256", b"x", b"y", 20_000)
rounds = int(20_000 * 4.0 / max(time.perf_counter() - start, 1e-6))  # about 4 s of C
print("in", flush=True)
try:
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", rounds)  # signals are only tripped meanwhile
except interrupts.Stop as stop:
    print(stop.signum, flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals sent to a process")
def test_of_two_stops_in_one_native_call_the_first_that_came_is_taken():
    """SIGTERM, then SIGINT, both while C code runs: Python runs SIGINT's handler first (by
    number), but the Stop is SIGTERM's, the one that came first."""
    child = subprocess.Popen(
        [sys.executable, "-c", ARRIVING_DURING_A_NATIVE_CALL],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        assert within(child, child.stdout.readline, "its first line") == "in\n"
        time.sleep(0.2)
        child.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        assert (
            within(child, child.stdout.readline, "the Stop") == f"{int(signal.SIGTERM)}\n"
        )  # was: 2
    finally:
        child.kill()
        child.wait(timeout=60)
