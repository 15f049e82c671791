"""The command line's signal policy: Ctrl-C, SIGTERM and SIGHUP all stop the work the same way.

Each raises `Stop` (a KeyboardInterrupt, so every `except KeyboardInterrupt` path that
keeps the text and ends the JSON object serves all three), and the exit status is
128 + the signal. Two cases need care:

- A signal that arrives while llama.cpp is inside a native call runs its Python
  handler at the next Python code, which may be one of our ctypes callbacks (the log,
  the load progress). An exception raised there is printed as "Exception ignored" and
  lost, so there the signal is only recorded: the load progress callback then asks
  llama.cpp to stop, and `raise_pending()` raises it once the native call returned.
- A signal that arrives while the command starts (Python imports the command line,
  parses the options) is held until the command can answer it (`take()`): `run --json`
  writes its object however early the signal came.
- A second signal while the first one's answer is being written out is ignored for a
  moment, so the text and the JSON object are not cut off; after that it ends the
  process at once, for a wrap-up that hangs.
- The first stop signal decides the exit status: a SIGINT that follows a SIGTERM
  is a repeat. Python runs the handlers of signals that came during one native call in
  the order of their numbers, SIGINT's first; the order they came in is read from the
  wakeup pipe, where the C-level handler writes each one as it comes (POSIX).

A signal the parent set to be ignored stays ignored (`nohup` ignores SIGHUP, a shell
ignores SIGINT in a script's background jobs): the policy covers only the others.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import NoReturn, TypeVar


def present(*names: str) -> tuple[int, ...]:
    """The signals of these names that the platform has (Windows has no SIGHUP, SIGBUS or
    SIGKILL): nothing POSIX-only is named at import time."""
    return tuple(getattr(signal, name) for name in names if hasattr(signal, name))


STOP_SIGNALS = present("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK")  # SIGBREAK: Windows' Ctrl-Break
REPEAT_GRACE_SECONDS = 2.0

_callback_codes: set[CodeType] = set()
_pending: int | None = None  # a stop held until it can be raised: the first one that came
_holding = False  # from `install()` until the command takes its stops (`take()`)
_raised: int | None = None  # the stop signal last raised as `Stop`
_stopping_since: float | None = None
_observers: list[Callable[[int], None]] = []
_arrivals: int | None = None  # the wakeup pipe's read end: signal numbers as they came

F = TypeVar("F", bound=Callable[..., object])


class Stop(KeyboardInterrupt):
    """The work was stopped by a signal; the process exits 128 + `signum`."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_status(interrupt: BaseException) -> int:
    return 128 + getattr(interrupt, "signum", signal.SIGINT)


def interrupted(interrupt: BaseException) -> int:
    """The line a stopped command ends with, on stderr; returns its exit status."""
    # On a terminal the line follows the echoed ^C.
    newline = "\n" if sys.stderr is not None and sys.stderr.isatty() else ""
    print(f"{newline}specrun: interrupted", file=sys.stderr, flush=True)
    return exit_status(interrupt)


def stop_signals() -> tuple[int, ...]:
    """The stop signals this process takes: those its parent did not set to be ignored."""
    return tuple(s for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN)


def on_signal(observer: Callable[[int], None]) -> None:
    """Call `observer(signum)` whenever a stop signal reaches Python code here (the
    supervisor learns from it that the process is not stuck in a native call)."""
    _observers.append(observer)


def _observe(signum: int) -> None:
    for observer in _observers:
        observer(signum)


def native_callback(function: F) -> F:
    """Mark a function that llama.cpp calls: a signal arriving in it is deferred, not lost."""
    _callback_codes.add(function.__code__)
    return function


def stop_requested() -> bool:
    return _pending is not None


def take() -> None:
    """The command can answer a stop from now on: raise the one held while it started."""
    global _holding, _pending
    _holding = False
    signum, _pending = _pending, None
    if signum is not None:
        _stop(signum)


def held() -> int | None:
    """The stop signal held so far, if any (the supervisor forks with it)."""
    return _pending


def settle() -> int | None:
    """`held`, counting a stop signal whose C-level handler has run but whose Python handler
    has not yet: the wakeup pipe has it. Called with the stop signals blocked, before a fork:
    a Python handler that ran only after it would hold the signal in the parent alone (the
    child's pending handlers are cleared at the fork), and the child would never stop for it."""
    global _pending
    if _pending is None and _holding:
        _pending = _first_arrived(0) or None
    return _pending


def raise_pending() -> None:
    """After a native call: raise the signal that arrived during it, if any, or again one
    whose `Stop` never reached specrun: a library that swallows exceptions while it is
    imported (seen at module level, registering a class) can eat it, and the work must not
    go on as if no signal had come. Every handler of `Stop` ends the process, so no native
    call follows one that was handled."""
    global _pending
    signum = _pending if _pending is not None else _raised
    _pending = None
    if signum is not None:
        _stop(signum)


def _stop(signum: int) -> NoReturn:
    """Raise the one `Stop` of this process; repeats are handled by `_handle` from now on."""
    global _stopping_since, _raised
    _stopping_since = time.monotonic()
    _raised = signum
    raise Stop(signum)


def exiting() -> None:
    """The work is done and the process is about to exit: a signal from now on is a repeat,
    ignored for a moment and then the end at once (a hang at exit), never a traceback."""
    global _stopping_since
    if _stopping_since is None:
        _stopping_since = time.monotonic()


def _first_arrived(signum: int) -> int:
    """Of the stop signals that came since the last handler ran, the first (`signum`, the
    one Python handles now, where the order is unknown)."""
    try:
        came = os.read(_arrivals, 512) if _arrivals is not None else b""
    except OSError:  # nothing written (a handler before ran for it), or no pipe
        came = b""
    return next((number for number in came if number in STOP_SIGNALS), signum)


def _handle(signum: int, frame: FrameType | None) -> None:
    global _pending
    signum = _first_arrived(signum)
    _observe(signum)
    if _stopping_since is not None:
        if time.monotonic() - _stopping_since < REPEAT_GRACE_SECONDS:
            return  # the answer is being written out
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        return
    if _holding or (frame is not None and frame.f_code in _callback_codes):
        if _pending is None:  # the first one decides the exit status
            _pending = signum
        return
    _stop(signum)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP through `Stop` (main thread, command line only),
    but for those the parent set to be ignored; held until `take()`."""
    global _holding, _arrivals
    _holding = True
    if os.name == "posix" and _arrivals is None:  # Windows' wakeup takes a socket only
        _arrivals, written = os.pipe()
        os.set_blocking(_arrivals, False)
        os.set_blocking(written, False)
        signal.set_wakeup_fd(written, warn_on_full_buffer=False)
    for signum in stop_signals():
        signal.signal(signum, _handle)


@contextmanager
def routed_to(stop: Callable[[], None]) -> Iterator[list[int]]:
    """While an event loop runs (the TUI), a signal asks it to stop rather than raising
    through it (asyncio would turn that into a bare KeyboardInterrupt). Yields the
    signals received, so the caller can exit with the right status."""
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        _observe(signum)
        received.append(signum)
        stop()

    previous = {signum: signal.signal(signum, handle) for signum in stop_signals()}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
