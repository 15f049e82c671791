"""Run the command line in a child process, so that a crash inside llama.cpp explains itself.

A SIGSEGV, SIGILL or abort in native code kills the process before Python can say a
word. So the `specrun` command forks at start: the child does the work on the same
terminal, stdin and stdout (nothing it wrote is lost), and the parent only waits. When
the child dies of a signal, the parent prints one line naming the likely cause and
what to try, and exits 128 + the signal. A llama.cpp assertion reaches the parent
through a pipe (ggml's abort callback), so its message is in that line and no native
backtrace is printed anywhere. An abort that the child can explain in full (a lost RPC
server, `specrun.llama.rpc`) reaches the parent as the line itself.

Where the OS cannot fork (Windows), the child is the same command started again
(`sys.orig_argv`), told by `SPAWNED_ENV` to do the work and where to write an abort's
message (a file in place of the pipe). Its death is read from its exit code, Windows'
exception codes included (`died_of`). What it lacks: the parent does not step in for a
child stuck waiting on an RPC server (below).

Signals: the terminal sends Ctrl-C, a hangup or Ctrl-\\ to both processes; one that a
program sends to the parent's pid alone (`kill`, `timeout`) is passed on to the child.
One that the parent was started with ignored is left alone: the child ignores it too.
Without `sigwaitinfo` (macOS, and wherever the child is spawned) the parent cannot tell
who sent a signal: it passes on SIGTERM and SIGHUP, which a terminal does not send to
both (a hangup received twice is one stop), and ignores Ctrl-C and Ctrl-Break, which it
does (a Windows console sends them to every process attached to it).

The two end together. The child dies with the parent (`specrun.system.lifeline`), and
the parent steps in where the child cannot take a stop signal, stuck in a native call:
ggml's RPC client waits with no deadline on a server that took the connection and then
stopped answering, and offers no way to set one. The child tells the parent, in a page
of shared memory, which RPC servers it uses and whether a stop signal reached its Python
code. With servers in use and no such word `STUCK_SECONDS` after a signal, or at a second
signal once the first is `REPEAT_GRACE_SECONDS` old, the parent kills the child, names
the servers, and exits 128 + the first signal.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path

from specrun.system import interrupts, lifeline

SUPERVISE_ENV = "SPECRUN_NO_SUPERVISOR"  # set: run in-process (a debugger, a profiler)
SPAWNED_ENV = "SPECRUN_SUPERVISED"  # in a spawned child: the file its abort message goes to
FORWARDED = interrupts.STOP_SIGNALS
NATIVE_FAULTS: dict[int, str] = {  # by signal number, those the platform has
    getattr(signal, name): what
    for name, what in (
        ("SIGSEGV", "a segmentation fault"),
        ("SIGBUS", "a bus error"),
        ("SIGILL", "an illegal instruction"),
        ("SIGFPE", "a floating-point exception"),
        ("SIGABRT", "an abort"),
    )
    if hasattr(signal, name)
}
# Windows ends a process that faults with an exception code, not a signal: these as the
# signal a POSIX system would have sent.
WINDOWS_FAULTS: dict[int, int] = {
    0xC0000005: signal.SIGSEGV,  # access violation
    0xC00000FD: signal.SIGSEGV,  # stack overflow
    0xC000001D: signal.SIGILL,  # illegal instruction
    0xC0000096: signal.SIGILL,  # privileged instruction
    0xC0000094: signal.SIGFPE,  # integer division by zero
    0xC0000409: signal.SIGABRT,  # a fast fail, as the C runtime's abort() ends
}
WINDOWS_ABORT_EXIT = 3  # the C runtime's abort() where it does not fail fast

STUCK_SECONDS = 5.0  # after a stop signal, for a child that uses RPC servers to take it

_abort_channel: int | None = None  # the child's end of the pipe to the parent
_abort_callback: ctypes._CFunctionType | None = None  # kept alive: ggml holds only the pointer
_last_words: list[Callable[[str], None]] = []  # `on_abort`'s callbacks
EXPLAINED = "specrun: error: "  # an abort message the child wrote as the whole line
# Shared by the parent and the child: byte 0 is 1 once a stop signal reached the child's
# Python code; from byte 1, the RPC servers it uses, comma-separated, ended by a NUL.
_shared: mmap.mmap | None = None
_SHARED_BYTES = 4096


def crash_hint(signum: int, message: str = "", amx_on: bool = False) -> str:
    """The one line that replaces a bare 'Segmentation fault'."""
    if signum == getattr(signal, "SIGKILL", None):
        return (
            "specrun: error: the process was killed (SIGKILL): most often the system ran out of "
            "memory; try a smaller model or --ctx, or see `specrun doctor`"
        )
    if message.startswith(EXPLAINED):
        return message
    what = NATIVE_FAULTS.get(signum, f"signal {signum}")
    if "mem_buffer != NULL" in message:  # ggml_init's allocation failed
        return (
            f"specrun: error: llama.cpp ran out of memory ({message}): "
            "lower --gpu-layers or --ctx, or use a smaller model"
        )
    if message:
        return (
            f"specrun: error: llama.cpp stopped on an internal check ({message}): "
            "the model file may be malformed or need a newer llama.cpp; see `specrun doctor`"
        )
    if signum == signal.SIGILL:
        tries = (
            "llama.cpp was built for CPU features this machine lacks (a wheel built elsewhere?): "
            "reinstall it here (`make`, see `specrun doctor`)"
        )
    elif amx_on:
        tries = "AMX is on (SPECRUN_AMX): unset it; or try --gpu-layers 0, or see `specrun doctor`"
    else:
        # Input cannot lead here (grammars and sampling values are bounded before llama.cpp
        # sees them): a crash is a bug, or a device's fault where layers are offloaded.
        tries = (
            "a bug; please report it with the command that caused it. Where layers run on a "
            "GPU, --gpu-layers 0 (and --draft-gpu-layers 0) tells whether the device is at "
            "fault; `specrun doctor` shows the build and devices"
        )
    return f"specrun: error: llama.cpp crashed with {what}: {tries}"


def install_abort_reporter() -> None:
    """In the child: send ggml's abort message to the parent instead of a backtrace on the
    terminal."""
    global _abort_callback
    if _abort_channel is None or _abort_callback is not None:
        return
    from llama_cpp._ggml import libggml

    callback_type = ctypes.CFUNCTYPE(None, ctypes.c_char_p)

    def report(message: bytes | None) -> None:
        first_line = (message or b"").split(b"\n", 1)[0]
        # "/tmp/pip-wheel-.../src/llama-vocab.cpp:2544: GGML_ASSERT(...)": the build path says
        # nothing
        location, separator, text = first_line.partition(b": ")
        if separator:
            first_line = os.path.basename(location) + separator + text
        explained = _explain(first_line.decode("utf-8", errors="replace"))
        line = (
            EXPLAINED + explained
            if explained
            else crash_hint(signal.SIGABRT, first_line.decode("utf-8", errors="replace"))
        )
        for callback in tuple(_last_words):
            try:
                callback(line.removeprefix(EXPLAINED))
            except BaseException:  # the parent must hear of the abort whatever happened here
                pass
        os.write(
            _abort_channel, (EXPLAINED + explained).encode() if explained else first_line[:400]
        )

    _abort_callback = callback_type(report)
    setter = libggml.ggml_set_abort_callback
    setter.restype, setter.argtypes = ctypes.c_void_p, [callback_type]
    setter(_abort_callback)


@contextmanager
def on_abort(callback: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, a native abort in the child first calls `callback` with its
    error line (less `specrun: error: `), so that a command writes out what it has (the
    `--json` object) before the process dies and the parent prints the line."""
    _last_words.append(callback)
    try:
        yield
    finally:
        _last_words.remove(callback)


def uses_servers(endpoints: Sequence[str]) -> None:
    """In the child: native calls may wait on these RPC servers from now on."""
    if _shared is not None:
        text = ",".join(endpoints).encode()[: _SHARED_BYTES - 2] + b"\0"
        _shared[1 : 1 + len(text)] = text


def _took_signal(signum: int) -> None:
    if _shared is not None:
        _shared[0] = 1


def _signal_taken() -> bool:
    return _shared is not None and _shared[0] == 1


def _servers() -> list[str]:
    text = _shared[1:].split(b"\0", 1)[0] if _shared is not None else b""
    return text.decode(errors="replace").split(",") if text else []


def stuck_line(servers: Sequence[str]) -> str:
    """The error line of a child killed while it waited on RPC servers."""
    which = (
        f"the RPC server {servers[0]}, which"
        if len(servers) == 1
        else f"the RPC servers {', '.join(servers)}, one of which"
    )
    return (
        f"specrun: error: stopped while waiting for {which} did not answer "
        "(ggml's RPC client has no deadline); check that machine and the network, and run again"
    )


def _explain(message: str) -> str | None:
    """The whole error line for an abort the child knows more about than ggml says."""
    rpc = sys.modules.get(
        "specrun.llama.rpc"
    )  # loaded wherever RPC servers are used; no import in an abort
    return rpc.explain_abort(message) if rpc else None


def supervise(work: Callable[[], int]) -> int:
    """Run `work` in a child process; return its exit status, explaining a native crash."""
    report = os.environ.pop(SPAWNED_ENV, None)  # popped: the child's own children are not
    if report is not None:
        return _as_spawned_child(work, report)
    if os.environ.get(SUPERVISE_ENV):
        return work()
    os.environ["GGML_NO_BACKTRACE"] = "1"  # a C++ terminate prints no backtrace either
    if sys.stdout is not None:  # None when stdout is closed (`>&-`)
        sys.stdout.flush()  # nothing buffered may be written twice after the fork
    return _forked(work) if hasattr(os, "fork") else _spawned()


def _forked(work: Callable[[], int]) -> int:
    global _abort_channel, _shared
    watched = interrupts.stop_signals()
    read_end, write_end = os.pipe()
    _shared = mmap.mmap(-1, _SHARED_BYTES)
    parent = os.getpid()
    # Blocked before the fork, so that no signal finds the parent between the fork and
    # its wait; the child takes its signals from where it unblocks them.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {*watched, signal.SIGCHLD})
    held = interrupts.settle()  # one already caught counts, though its handler has not run
    pid = os.fork()
    if pid == 0:
        lifeline.die_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(read_end)
        _abort_channel = write_end
        interrupts.on_signal(_took_signal)
        if held is not None:  # came before the fork: the command takes it
            _took_signal(held)
        install_abort_reporter()
        return work()
    os.close(write_end)
    status, first = _wait(pid, watched, held)
    message = _read_all(read_end)
    if first is not None and first.killed:  # stuck in a native call: the child said nothing
        servers = _servers()
        print(stuck_line(servers) if servers else "specrun: interrupted", file=sys.stderr)
        return 128 + first.signum
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) not in FORWARDED:
        return _died(os.WTERMSIG(status), message)
    # Exited, or ended by a stop signal (a second one finds the default disposition).
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    # Stopped: by the first stop signal, which the child may have taken second (two that
    # reach it in one native call are handled in the order of their numbers).
    stopped = first is not None and code - 128 in FORWARDED
    return 128 + first.signum if stopped and first is not None else code


def _spawned() -> int:
    """The command started again as the child, where there is no fork."""
    interrupts.take()  # a stop held so far is this process's: the child would not know of it
    descriptor, report = tempfile.mkstemp(prefix="specrun-", suffix=".abort")
    os.close(descriptor)
    try:
        with _passing_on(interrupts.stop_signals()) as started:
            child = subprocess.Popen(
                [sys.executable, *sys.orig_argv[1:]], env={**os.environ, SPAWNED_ENV: report}
            )
            started(child.pid)
            returncode = child.wait()
        message = Path(report).read_text(encoding="utf-8", errors="replace").strip()
    finally:
        os.unlink(report)
    signum = died_of(returncode, message)
    return returncode if signum is None else _died(signum, message)


def _as_spawned_child(work: Callable[[], int], report: str) -> int:
    global _abort_channel
    lifeline.die_with_parent(os.getppid())
    _abort_channel = os.open(report, os.O_WRONLY)
    install_abort_reporter()
    return work()


def died_of(returncode: int, message: str = "") -> int | None:
    """The signal a child process died of, from its exit code (`subprocess`'s, negative
    for a signal; Windows' exception codes as the signal POSIX would send); None where it
    exited. An exit of 3 is an abort only where ggml said why."""
    if returncode < 0:
        return -returncode
    if returncode == WINDOWS_ABORT_EXIT and message:
        return int(signal.SIGABRT)
    return WINDOWS_FAULTS.get(returncode)


def _died(signum: int, message: str) -> int:
    """Explain a child's death by `signum` on stderr where it was a crash; its exit status."""
    if signum in NATIVE_FAULTS or signum == getattr(signal, "SIGKILL", None):
        from specrun.llama.devices import amx_allowed

        print(crash_hint(signum, message, amx_allowed()), file=sys.stderr, flush=True)
    return 128 + signum


@contextmanager
def _passing_on(watched: Sequence[int]) -> Iterator[Callable[[int], None]]:
    """While the child runs, the stop signals that reach this process as `sigwaitinfo`'s
    absence allows (the module's docstring); yields the function that names the child.
    A signal that comes before the child exists is passed on once it does."""
    child: list[int] = []
    pending: list[int] = []

    def pass_on(signum: int, _frame: object) -> None:
        if child:
            with suppress(OSError):  # the child has just ended
                os.kill(child[0], signum)
        else:
            pending.append(signum)

    def let_through(signum: int, _frame: object) -> None:
        """The terminal sent it to the child too. Not SIG_IGN: a started child would
        inherit that and take the signal as one its parent meant it to ignore."""

    console = interrupts.present("SIGINT", "SIGBREAK")
    previous = {
        signum: signal.signal(signum, let_through if signum in console else pass_on)
        for signum in watched
    }

    def started(pid: int) -> None:
        child.append(pid)
        for signum in pending:
            os.kill(pid, signum)

    try:
        yield started
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@dataclass
class FirstStop:
    """The first stop signal the parent saw, when, and whether it killed the child for it."""

    signum: int
    since: float
    killed: bool = False


def _wait(pid: int, watched: Sequence[int], held: int | None) -> tuple[int, FirstStop | None]:
    """Wait for the child, passing on the signals a program sent to this process alone
    (`held`: one that came before the fork, which the child holds too). Returns its wait
    status and the first stop signal, marked `killed` where the child was killed for it."""
    first = None if held is None else FirstStop(held, time.monotonic())
    if not hasattr(signal, "sigwaitinfo"):  # macOS
        with _passing_on(watched) as started:
            started(pid)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {*watched, signal.SIGCHLD})
            return os.waitpid(pid, 0)[1], first  # retried across the handlers (PEP 475)
    waited = {*watched, signal.SIGCHLD}
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, first
        deadline = _stuck_deadline(first)
        if deadline is None:
            info = signal.sigwaitinfo(waited)
        else:
            timed = signal.sigtimedwait(waited, max(0.0, deadline - time.monotonic()))
            if timed is None:  # the child did not take the signal in time
                if _signal_taken() or first is None:
                    continue
                return _kill(pid), replace(first, killed=True)
            info = timed
        if info.si_signo not in FORWARDED:  # SIGCHLD
            continue
        if info.si_pid not in (0, pid):  # sent by a program to us alone; a terminal's went to both
            # A repeat goes on as the first signal, so the child cannot take it for the first.
            os.kill(pid, info.si_signo if first is None else first.signum)
        if first is None:
            first = FirstStop(info.si_signo, time.monotonic())
        elif (
            not _signal_taken()
            and time.monotonic() - first.since >= interrupts.REPEAT_GRACE_SECONDS
        ):
            return _kill(pid), replace(first, killed=True)  # a second signal, as the child's policy


def _stuck_deadline(first: FirstStop | None) -> float | None:
    """When to stop waiting for the child to take a stop signal: only where it uses RPC
    servers, whose native waits have no end of their own; other native calls do."""
    if first is None or _signal_taken() or not _servers():
        return None
    return first.since + STUCK_SECONDS


def _kill(pid: int) -> int:
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace").strip()
