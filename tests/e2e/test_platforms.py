"""specrun on Windows and macOS, simulated on this machine by a Python whose `signal` and
`os` lack what those platforms lack, each run of the command in a subprocess.

Windows: `signal` keeps only the names Windows' has (no SIGHUP, SIGKILL, SIGCHLD,
sigwaitinfo or pthread_sigmask), `os` has no fork, getloadavg, killpg or wait-status
macros. The supervisor then starts the command again as its child (`sys.orig_argv`), and a
crash or Ctrl-C must still end as on Linux. macOS: fork, but no sigwaitinfo or
sigtimedwait, so the parent passes on the signals sent to it alone by handlers.

What this would not catch: what differs in the platforms themselves. Windows' console
sends Ctrl-C as an event, not a signal to a process group (simulated here by a signal to
both processes); its exception codes for a crash (tested as a table, `died_of`); its
paths, its llama.cpp build, its lack of /proc; the watch of a dead parent, which on
Windows waits on the parent's handle. On macOS, its /proc-less CPU and memory queries and
its Metal build.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specrun.llama.supervise import WINDOWS_ABORT_EXIT, died_of
from tests.support.cli import counting_run
from tests.support.processes import default_signals
from tests.support.server import Server
from tests.support.tinymodels import write_tiny_model

ROOT = Path(__file__).resolve().parents[2]

WINDOWS = """
import os, signal
# What Windows' signal module has (Python 3.10 to 3.13); all else goes.
HAS = {"SIGABRT", "SIGFPE", "SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "SIG_DFL", "SIG_IGN",
       "NSIG", "Signals", "Handlers", "default_int_handler", "getsignal", "raise_signal",
       "set_wakeup_fd", "signal", "strsignal", "valid_signals"}
for name in [n for n in dir(signal) if not n.startswith("_") and n not in HAS]:
    delattr(signal, name)
for name in ("fork", "forkpty", "getloadavg", "killpg", "getpgid", "setsid", "sched_getaffinity",
             "WIFEXITED", "WEXITSTATUS", "WIFSIGNALED", "WTERMSIG"):
    if hasattr(os, name):
        delattr(os, name)
"""
MACOS = """
import os, signal
for name in ("sigwaitinfo", "sigtimedwait"):
    delattr(signal, name)
del os.sched_getaffinity
"""
# A Mac with Apple silicon and a Metal build, as far as specrun can tell (tests/support).
METAL = MACOS + "import tests.support.metal_registry\n"
COMMAND = """
import sys
sys.argv = ["specrun", *sys.argv[1:]]
from specrun.__main__ import entry
entry()
"""


def as_on(platform: str, *args: str, **popen: object) -> subprocess.Popen:
    """`specrun ARGS` under the platform's shim, in a session of its own (its process group
    is what a terminal's Ctrl-C reaches)."""
    return subprocess.Popen(
        [sys.executable, "-c", platform + COMMAND, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,  # the tests stop it with Ctrl-C and SIGTERM
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **popen,
    )


def ended(process: subprocess.Popen) -> tuple[str, str]:
    try:
        return process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def supervised(platform: str, body: str) -> subprocess.CompletedProcess:
    """`body` as the work of a supervised process under the platform's shim."""
    program = (
        platform
        + "import ctypes, sys\nfrom specrun.llama.supervise import supervise\ndef work():\n"
        + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    ")
        + "    return 0\nsys.exit(supervise(work))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def interrupted_json(out: str, err: str) -> None:
    assert json.loads(out)["finish_reason"] == "interrupted", err
    lines = err.strip().splitlines()  # a busy machine's warning may come first
    assert lines[-1] == "specrun: interrupted" and lines.count(lines[-1]) == 1, err
    assert "Traceback" not in err


def test_help_and_a_run_on_windows(tiny_target: Path):
    shown = as_on(WINDOWS, "--help")
    out, err = ended(shown)
    assert shown.returncode == 0 and "Usage" in out, err
    ran = as_on(
        WINDOWS, "run", "-t", str(tiny_target), "--threads", "1", "-n", "4", "--temp", "0",
        "--json", "the cat",
    )  # fmt: skip
    out, err = ended(ran)
    assert ran.returncode == 0, err
    assert json.loads(out)["generated_tokens"] == 4
    front_ends = "import specrun_tui.app, specrun_tui.engine_process, specrun.server.app"
    imported = subprocess.run(
        [sys.executable, "-c", WINDOWS + front_ends],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr


def test_doctor_on_windows(demo_pair):
    process = as_on(
        WINDOWS + "import platform\nplatform.system = lambda: 'Windows'\n", "doctor", "--json"
    )
    out, err = ended(process)
    assert process.returncode == 0, err
    report = json.loads(out)
    assert report["host"]["system"] == "Windows" and report["problems"] == [], report["problems"]


def test_doctor_on_a_metal_mac_names_metal_and_its_memory(demo_pair):
    process = as_on(METAL, "doctor", cwd=ROOT)
    out, err = ended(process)
    assert process.returncode == 0, err
    assert "backends:          RPC, CPU, Metal" in out
    assert (
        "MTL0       GPU  Metal: Apple M2 Pro  "
        "(20.00 GB free of 21.47 GB, of the memory it shares with the CPU)"
    ) in out
    assert "target: 30/30 layers on MTL0 (20.0 of 21.5 GB free); draft: 30/30 on MTL0" in out
    assert out.rstrip().endswith("no problems found")  # Apple silicon, and a Metal build
    process = as_on(METAL, "doctor", "--json", cwd=ROOT)
    out, err = ended(process)
    report = json.loads(out)
    (metal,) = [d for d in report["devices"] if d["backend"] == "Metal"]
    assert metal == {
        "name": "MTL0", "description": "Apple M2 Pro", "kind": "GPU", "backend": "Metal",
        "free_bytes": 20_000_000_000, "total_bytes": 21_474_836_480,
    }  # fmt: skip
    assert report["host"]["system"] == "Darwin" and report["host"]["machine"] == "arm64"


@pytest.mark.parametrize("platform", [WINDOWS, MACOS], ids=["windows", "macos"])
def test_ctrl_c_mid_generation_keeps_the_json_object(demo_pair, platform):
    process = as_on(platform, *counting_run(demo_pair[0], "--json"))
    time.sleep(5)  # loaded, and counting
    os.killpg(process.pid, signal.SIGINT)  # the terminal's Ctrl-C: to both processes
    out, err = ended(process)
    assert process.returncode == 128 + signal.SIGINT, err
    interrupted_json(out, err)


def test_output_redirected_on_windows_is_utf8_as_its_input(tiny_target, tiny_draft, tmp_path):
    """Windows writes a redirected stream in its ANSI code page (simulated by
    PYTHONIOENCODING), which has no γ: bench's table is written whole, in UTF-8."""
    table = tmp_path / "table.txt"
    bench = ["bench", "-t", str(tiny_target), "-d", str(tiny_draft), "--threads", "1"]
    with table.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-c", WINDOWS + COMMAND, *bench, "--modes", "plain,γ=2",
             "--repeat", "1", "-n", "4"],
            stdout=out, stderr=subprocess.PIPE, text=True, timeout=120,
            env={**os.environ, "PYTHONIOENCODING": "cp1252"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "mean γ" in table.read_text(encoding="utf-8")


def test_serve_on_windows_answers_and_ctrl_c_stops_it(tiny_target):
    server = Server("-t", str(tiny_target), program=("-c", WINDOWS + COMMAND), own_session=True)
    try:
        answer = server.client().completions.create(
            model=server.model, prompt="the cat", max_tokens=4, temperature=0
        )
        assert answer.usage.completion_tokens == 4
    finally:
        os.killpg(server.process.pid, signal.SIGINT)  # the console's Ctrl-C: to both processes
        status = server.process.wait(timeout=60)
        server.reader.join(timeout=60)
    assert status == 0, "".join(server.lines)
    assert server.lines[-1] == "specrun: stopped\n", server.lines


@pytest.mark.parametrize("platform", [WINDOWS, MACOS], ids=["windows", "macos"])
def test_a_sigterm_to_the_parent_alone_reaches_the_work(demo_pair, platform):
    process = as_on(platform, *counting_run(demo_pair[0], "--json"))
    time.sleep(5)
    process.send_signal(signal.SIGTERM)  # `kill`, `timeout`: the parent's pid alone
    out, err = ended(process)
    assert process.returncode == 128 + signal.SIGTERM, err
    interrupted_json(out, err)


@pytest.mark.parametrize("platform", [WINDOWS, MACOS], ids=["windows", "macos"])
def test_a_segfault_is_one_line_and_keeps_what_was_written(platform):
    result = supervised(
        platform, 'sys.stdout.write("partial answer"); sys.stdout.flush()\nctypes.string_at(0)'
    )
    assert result.returncode == 128 + signal.SIGSEGV, result.stderr
    assert result.stdout == "partial answer"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "segmentation fault" in lines[0], result.stderr


def test_a_llama_cpp_assertion_on_windows_is_one_line(tmp_path):
    broken = write_tiny_model(tmp_path / "duplicate-token.gguf", duplicate_token=True)
    process = as_on(WINDOWS, "run", "-t", str(broken), "--temp", "0", "-n", "4", "hello")
    out, err = ended(process)
    assert process.returncode == 128 + signal.SIGABRT, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "GGML_ASSERT" in lines[0] and "llama-vocab.cpp" in lines[0], err
    assert out == ""


@pytest.mark.parametrize(
    "returncode, message, signum",
    [
        (-signal.SIGSEGV, "", signal.SIGSEGV),  # POSIX, as subprocess has it
        (0xC0000005, "", signal.SIGSEGV),  # Windows: an access violation
        (0xC000001D, "", signal.SIGILL),
        (0xC0000409, "", signal.SIGABRT),  # abort() failing fast
        (WINDOWS_ABORT_EXIT, "GGML_ASSERT(x) failed", signal.SIGABRT),
        (WINDOWS_ABORT_EXIT, "", None),  # a program's own exit status 3
        (0, "", None),
        (130, "", None),  # stopped by Ctrl-C, in its own words
    ],
)
def test_what_a_child_died_of(returncode, message, signum):
    assert died_of(returncode, message) == signum
