"""Processes a test starts: the signal dispositions they rely on, and waits with deadlines.

A suite started from a background shell inherits SIGINT ignored, and `nohup` leaves SIGHUP
ignored; a child inherits what is ignored across exec, and specrun keeps an ignored signal
ignored. A test that stops a process with a signal starts it with `preexec_fn=default_signals`.

Every read of a process's pipes goes through `within` or `finish`: past the deadline the
process (and the group it leads) is killed, which ends the read, and the test fails saying
what it waited for, instead of hanging the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import IO, Any, AnyStr, TypeVar

DEADLINE = 60.0  # seconds: a fail-safe for what is waited on, never a measurement
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


def default_signals() -> None:
    """In a child, before exec: the stop signals at their defaults, whatever the suite
    inherited."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def kill(process: subprocess.Popen[Any]) -> None:
    """SIGKILL to the process, and to its group where it leads one (`start_new_session`): a
    supervisor's worker holds the same pipes."""
    with suppress(ProcessLookupError):
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    process.wait(timeout=DEADLINE)


def _in_threads(
    process: subprocess.Popen[Any], calls: list[Callable[[], T]], what: str, timeout: float
) -> list[T]:
    results: list[T | None] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as error:  # noqa: BLE001 - raised in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout  # one deadline for all of them
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(thread.is_alive() for thread in threads):
        kill(process)  # the pipes close: the reads end
        for thread in threads:
            thread.join(DEADLINE)
        raise AssertionError(f"timed out waiting for {what}; the process was killed")
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]


def _rest(pipe: IO[AnyStr] | None) -> Callable[[], AnyStr]:
    """A read of what is left in `pipe`; nothing where it was not piped or is closed."""
    if pipe is None or pipe.closed:
        return lambda: b""  # type: ignore[return-value]
    return pipe.read


def within(
    process: subprocess.Popen[Any], call: Callable[[], T], what: str, timeout: float = DEADLINE
) -> T:
    """`call()`, a read of `process`'s pipes (`lambda: process.stdout.read(4)`), with a
    deadline."""
    return _in_threads(process, [call], what, timeout)[0]


def finish(
    process: subprocess.Popen[AnyStr], timeout: float = DEADLINE
) -> tuple[AnyStr, AnyStr, int]:
    """All the rest of stdout and stderr (those piped and still open), and the exit status.
    Unlike `communicate`, stdin is left open: a process stopped while it reads stdin must
    not see its end instead."""
    stdout, stderr = _in_threads(
        process, [_rest(process.stdout), _rest(process.stderr)], "the process to end", timeout
    )
    code = process.wait(timeout=DEADLINE)
    if process.stdin is not None:
        process.stdin.close()
    return stdout, stderr, code
