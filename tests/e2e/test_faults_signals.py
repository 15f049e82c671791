"""Signals and the processes specrun starts (issue 33): the real command in subprocesses and
pseudo-terminals, signals sent as a terminal, `kill`, `nohup` or a shell send them.

- A signal the parent set to be ignored stays ignored, in the supervisor and the worker.
- From the moment the policy is installed, a stop signal ends every command the same way:
  128 + the signal, the `interrupted` line, `--json`'s object, never a traceback; a piped
  chat's reply cut short still ends its line.
- The supervisor and its worker, and the TUI and its engine, do not outlive each other.
- A peer that answers the RPC handshake and then stalls yields to Ctrl-C and SIGTERM.
- A server lost mid-generation still leaves `--json`'s object.
- Ctrl-C in the TUI stops the answer, as everywhere in specrun.
- `bench --plot` checks its format before it runs; a plot that fails leaves the table.

Linux only where a test reads /proc (the signal masks, a process's children, what it waits
on): the waits poll it with a generous limit, a fail-safe, never a measurement.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from specrun.errors import SpecrunError
from specrun.llama import rpc
from tests.support.cli import counting_run
from tests.support.processes import DEADLINE, default_signals, finish, kill, within
from tests.support.rpcserver import RpcServer
from tests.support.server import SERVING
from tests.support.terminal import Terminal

LIMIT = DEADLINE  # seconds: a fail-safe for what is waited on
ONE_LONG_LINE = "Write the numbers from 1 to 300 on one line, separated by commas."
PROMPT_BOX = "Message, or /help"
CTRL_C = "\x03"  # a key to the TUI, which reads the terminal raw


def start(
    *args: str, stdin: int = subprocess.DEVNULL, ignoring: int | None = None
) -> subprocess.Popen[bytes]:
    """`specrun ARGS` in a session of its own (a group to signal, as a terminal does);
    `ignoring`: started with that signal ignored, as `nohup` or a shell's background job is."""

    def ignore() -> None:
        default_signals()  # whatever the suite inherited: the tests send these
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


def wait_until(
    condition: Callable[[], object], what: str, state: Callable[[], object] = lambda: ""
) -> None:
    """Poll `condition`; past the limit, fail saying `what` never came, and `state()`."""
    deadline = time.monotonic() + LIMIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what} {state()}")
        time.sleep(0.05)


def signals_in(pid: int, field: str) -> set[int]:
    """The signals /proc lists for the process in `field`: SigIgn, SigCgt (caught), SigBlk."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def worker_of(pid: int) -> int:
    """The child that `specrun` (the supervisor, `pid`) runs the command in."""
    wait_until(lambda: children(pid), f"{pid} has forked its worker")
    return children(pid)[0]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def waits_on_a_pipe(pid: int) -> bool:
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def policy_installed(pid: int) -> Callable[[], bool]:
    """SIGTERM is caught once specrun installed its signal policy, its first act."""
    return lambda: signal.SIGTERM in signals_in(pid, "SigCgt")


def lines(data: bytes) -> list[str]:
    return data.decode().splitlines()


# --- signals the parent set to be ignored -------------------------------------------------


@pytest.mark.parametrize(
    "signum", [signal.SIGHUP, signal.SIGINT], ids=["nohup-hangup", "background-job-ctrl-c"]
)
def test_a_signal_the_parent_ignored_stays_ignored(demo_pair, signum):
    command = counting_run(demo_pair[0], "-d", "none", "--threads", "1", tokens=120)
    process = start(*command, ignoring=signum)
    first = within(process, lambda: process.stdout.read(4), "the answer")  # under way
    for pid in process.pid, worker_of(process.pid):
        assert signum in signals_in(pid, "SigIgn"), pid  # was: the worker took it again
    process.send_signal(signum)  # `kill`: to specrun alone
    os.killpg(process.pid, signum)  # a hangup or Ctrl-C at the terminal: to every process
    rest, stderr, code = finish(process)
    assert code == 0, stderr  # was: 129 and 130, the answer cut short
    assert stderr == b"" and len(first + rest) > 4 and rest.endswith(b"\n")


def test_serve_under_nohup_serves_on_through_a_hangup(tiny_target):
    process = subprocess.Popen(
        ["nohup", sys.executable, "-m", "specrun", "serve", "--port", "0", "--threads", "1"]
        + ["-t", str(tiny_target)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,  # nohup sets SIGHUP ignored; the test stops it with SIGTERM
    )
    try:
        url = ""
        while not url and (line := within(process, process.stderr.readline, "serving")):
            url = match[2] if (match := SERVING.match(line)) else ""
        assert url, "the server did not start"
        for pid in process.pid, worker_of(process.pid):
            assert signal.SIGHUP in signals_in(pid, "SigIgn"), pid
        os.killpg(process.pid, signal.SIGHUP)  # the end of the login session
        answer = httpx.post(
            f"{url}/v1/completions", json={"prompt": "the sea", "max_tokens": 4}, timeout=LIMIT
        )
        assert answer.status_code == 200, answer.text
        process.send_signal(signal.SIGTERM)
        _, stderr, code = finish(process)
        assert code == 0 and stderr.strip() == "specrun: stopped"
    finally:
        kill(process)


# --- a stop signal from the first moment on -----------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_at_any_moment_ends_run_as_the_policy_says(demo_pair, signum):
    """Wherever the signal lands, from the policy's installation on (imports, parsing, the
    fork, loading, generating): 128 + the signal, the one line, no traceback, and any JSON
    object an interrupted one. Was: a traceback in the first half second, and 130 for any
    signal while loading."""
    for delay in (0.0, 0.2, 0.5, 1.0):  # where the signal lands; the outcome must not depend on it
        process = start(*counting_run(demo_pair[0], "--threads", "1", "--json"))
        wait_until(policy_installed(process.pid), "the policy is in")
        time.sleep(delay)
        process.send_signal(signum)
        stdout, stderr, code = finish(process)
        assert code == 128 + signum, (delay, stderr)
        assert lines(stderr) == ["specrun: interrupted"], (delay, stderr)
        # Was: no object when the signal came before the command line was in (0.9 s).
        assert json.loads(stdout)["finish_reason"] == "interrupted", (delay, stdout)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_while_starting_writes_the_json_object(tiny_target, signum):
    # The run waits for its prompt on stdin, which stays open: a start-up that does not end.
    process = start(
        "run", "-t", str(tiny_target), "--threads", "1", "--json", stdin=subprocess.PIPE
    )
    worker = worker_of(process.pid)
    wait_until(lambda: waits_on_a_pipe(worker), "the worker reads stdin")
    process.send_signal(signum)
    stdout, stderr, code = finish(process)  # was: a read with no end where the signal was lost
    assert code == 128 + signum and lines(stderr) == ["specrun: interrupted"], stderr
    record = json.loads(stdout)  # was: nothing, and 130 for any signal
    assert record["finish_reason"] == "interrupted" and record["text"] == ""
    assert record["target"] == str(tiny_target) and record["generated_tokens"] == 0


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
    first = within(process, lambda: process.stdout.read(8), "the reply")  # under way
    process.send_signal(signal.SIGTERM)
    rest, stderr, code = finish(process)
    assert code == 128 + signal.SIGTERM and lines(stderr)[-1] == "specrun: interrupted"
    reply = first + rest
    assert reply.endswith(b"\n") and not reply.endswith(b"\n\n")  # was: no newline at all


# --- the supervisor and its worker end together ---------------------------------------------


def test_a_worker_ends_with_its_supervisor(tmp_path):
    server = RpcServer(tmp_path / "server.log")
    try:
        worker = worker_of(server.process.pid)
        server.process.kill()  # SIGKILL to `specrun` alone, as the out-of-memory killer does
        server.process.wait(timeout=LIMIT)

        def refused() -> bool:
            try:
                rpc.check(server.endpoint)
            except SpecrunError as error:
                return "cannot reach" in str(error)
            return False

        wait_until(refused, "the port is closed")  # was: the worker served on, on its own
        assert not alive(worker)
    finally:
        server.kill()


class StallingPeer:
    """Answers ggml's handshake (RPC_CMD_HELLO) on every connection, then never answers the
    command that follows: a server that hangs, or a network gone silent, after the handshake.
    Its threads end with `close()`, within the test."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.stalled = threading.Event()  # a command came and was left unanswered
        self.connections: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # shut down
                return
            self.connections.append(connection)
            thread = threading.Thread(target=self._answer, args=(connection,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _answer(self, connection: socket.socket) -> None:
        try:
            hello = b""
            while len(hello) < 1 + 8 + rpc.CAPS_SIZE:
                chunk = connection.recv(1 + 8 + rpc.CAPS_SIZE - len(hello))
                if not chunk:
                    return
                hello += chunk
            version = bytes([*rpc.PROTOCOL, 0])
            connection.sendall(
                struct.pack("<Q", 4 + rpc.CAPS_SIZE) + version + bytes(rpc.CAPS_SIZE)
            )
            if connection.recv(1):  # specrun's own check hangs up here; ggml asks on
                self.stalled.set()
        except OSError:
            pass

    def close(self) -> None:
        # shutdown, not only close: a close leaves a thread blocked in accept or recv there
        for each in (self.listener, *self.connections):
            with suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()
        for thread in self.threads:
            thread.join(LIMIT)
        assert not any(thread.is_alive() for thread in self.threads), "a peer thread lives on"


@contextmanager
def stalling_peer() -> Iterator[StallingPeer]:
    peer = StallingPeer()
    try:
        yield peer
    finally:
        peer.close()


@pytest.mark.parametrize(
    "signum, to_every_process",
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-at-the-terminal", "sigterm-to-specrun"],
)
def test_a_server_that_stalls_after_the_handshake_yields_to_a_signal(
    tiny_target, signum, to_every_process
):
    with stalling_peer() as peer:
        process = start(
            "run", "-t", str(tiny_target), "--threads", "1", "--json", "--rpc", peer.endpoint, "hi"
        )
        assert peer.stalled.wait(LIMIT)  # loading waits on the peer, in ggml's RPC client
        if to_every_process:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        stdout, stderr, code = finish(process)  # was: no end but SIGKILL
    assert code == 128 + signum, stderr
    assert lines(stderr) == [
        f"specrun: error: stopped while waiting for the RPC server {peer.endpoint}, which did "
        "not answer (ggml's RPC client has no deadline); check that machine and the network, "
        "and run again"
    ]
    assert stdout == b""


def test_json_keeps_the_text_when_a_server_is_lost(tmp_path, tiny_target):
    args = ["run", "-t", str(tiny_target), "--raw", "--temp", "0", "-n", "900", "--threads", "1"]
    local = subprocess.run(
        [sys.executable, "-m", "specrun", *args, "--json", "the sea"],
        capture_output=True,
        timeout=LIMIT,
        check=True,
    )
    whole = json.loads(local.stdout)["text"]
    first, second = RpcServer(tmp_path / "first.log"), RpcServer(tmp_path / "second.log")
    try:
        client = start(*args, "--json", "--rpc", f"{first.endpoint},{second.endpoint}", "the sea")
        placed = within(client, client.stderr.readline, "the placement").decode()
        assert f"RPC1@{second.endpoint}" in placed, placed  # the layers go to both servers
        second.kill()
        stdout, stderr, code = finish(client)
    finally:
        kill(client)
        first.kill()
        second.kill()
    assert code != 0, stderr
    error = lines(stderr)[-1]
    assert error.startswith(f"specrun: error: lost the RPC server {second.endpoint}"), stderr
    record = json.loads(stdout)  # was: nothing on stdout
    assert record["finish_reason"] == "error"
    assert record["error"] == error.removeprefix("specrun: error: ")
    assert whole.startswith(record["text"]) and len(record["text"]) < len(whole)


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


def test_the_tui_engine_ends_with_the_tui(tiny_target):
    # The engine process loads, stuck on a peer that stalls: it reads no pipe meanwhile.
    with stalling_peer() as peer, chat_terminal(tiny_target, "--rpc", peer.endpoint) as terminal:
        assert peer.stalled.wait(LIMIT)
        tui = worker_of(terminal.process.pid)
        os.kill(tui, signal.SIGKILL)
        # Was: the engine process lived on, loading forever.
        wait_until(
            lambda: terminal.read(0.05) or not terminal.session(),  # read: the pty must not fill
            "every process of the chat is gone",
            lambda: [Path(f"/proc/{p}/cmdline").read_bytes() for p in terminal.session()],
        )


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
