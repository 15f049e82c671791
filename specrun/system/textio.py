"""Text at specrun's edges: one policy for what comes in, one for what goes out.

In: arguments, stdin and files are UTF-8 text whatever the locale. Bytes that are not
are an error that says where they are, never silently replaced: a prompt or a catalog
that says something other than what the user wrote is worse than no answer.

Out: stdout is the answer, in UTF-8 whatever the locale, as stderr (Windows would write
a redirected stream in its ANSI code page, which has no γ). A reader that goes away
(`| head`, EPIPE) has what it wanted: the rest is dropped and specrun exits 0. Any other
failure to write it (a full disk, an I/O error, a closed stdout) loses the answer: a
one-line error, exit 1.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TextIO, TypeVar, overload

from specrun.errors import OptionError, SpecrunError

T = TypeVar("T")


class StdoutClosed(Exception):
    """The reader of stdout went away. Not an OSError on purpose: click turns an EPIPE
    OSError into exit 1, and this must reach specrun's own handler."""


class OutputError(SpecrunError):
    """stdout cannot take the answer."""


def decode_utf8(
    data: bytes, source: str, *, first_line: int = 1, error: type[SpecrunError] = SpecrunError
) -> str:
    """`data` as text, or `error` naming `source` and where the first bad byte is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = first_line + data.count(b"\n", 0, exc.start)
        raise error(
            f"{source} is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}, "
            f"column {exc.start - line_start + 1})"
        ) from None


def read_text(
    path: Path, what: str, *, error: type[SpecrunError] = SpecrunError, limit: int | None = None
) -> str:
    """A UTF-8 text file; `what` names it in the error ("catalog", "prompts"). With a `limit`
    (bytes), a file or pipe no larger: a device (`/dev/zero`, a terminal) is refused, not read
    until memory runs out or for ever."""
    try:
        with path.open("rb") as file:
            if limit is None:
                data = file.read()
            else:
                mode = os.fstat(file.fileno()).st_mode
                if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                    raise error(f"{what} {path} is not a file")
                data = file.read(limit + 1)
                if len(data) > limit:
                    raise error(f"{what} {path} is larger than {limit} bytes")
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    return decode_utf8(data, f"{what} {path}", error=error)


@overload
def argument_text(value: str, name: str) -> str: ...


@overload
def argument_text(value: str | None, name: str) -> str | None: ...


def argument_text(value: str | None, name: str) -> str | None:
    """A command-line argument that is text for the model (not a path). Python decodes
    argv with surrogateescape, so bytes that were not UTF-8 arrive as lone surrogates."""
    if value is not None and not _encodable(value):
        decode_utf8(
            os.fsencode(value), name, error=OptionError
        )  # raises, naming the first bad byte
    return value


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_stdin() -> str | None:
    """All of stdin as text; None where there is none: a terminal, or closed (`<&-`)."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    return decode_utf8(sys.stdin.buffer.read(), "stdin")


def stdin_lines() -> Iterator[str]:
    """stdin line by line as text (each as soon as it arrives); none when it is closed."""
    if sys.stdin is None:
        return
    for number, line in enumerate(sys.stdin.buffer, start=1):
        yield decode_utf8(line, "stdin", first_line=number)


class _GuardedStdout:
    """sys.stdout with the output policy applied to every write and flush. A failure
    sticks: every later write raises it again, so code that swallows one exception
    (click probes its stream with a write) cannot make the output look delivered."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._failure: Exception | None = None

    def write(self, text: str) -> int:
        return self._guarded(self._stream.write, text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    def _guarded(self, operation: Callable[..., T], *args: object) -> T:
        if self._failure is None:
            try:
                return operation(*args)
            except BrokenPipeError:
                self._failure = StdoutClosed()
            except OSError as exc:
                self._failure = OutputError(f"cannot write the output: {exc.strerror or exc}")
            # What is still buffered, and Python's flush at exit, go to /dev/null instead.
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
        raise self._failure


@contextmanager
def guarded_stdout() -> Iterator[None]:
    """Apply the output policy to sys.stdout for the block; its end flushes stdout, so a
    failure to write the last of the answer is reported here, not lost at exit."""
    if sys.stdout is None:
        raise OutputError("stdout is closed; redirect it to a file or to /dev/null")
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):  # not pytest's capture, say
            stream.reconfigure(encoding="utf-8")
    original = sys.stdout
    sys.stdout = _GuardedStdout(original)  # a TextIO by duck typing (__getattr__)
    try:
        yield
    except BaseException:
        with suppress(StdoutClosed, OutputError):  # the failure being raised is the one to report
            sys.stdout.flush()
        raise
    else:
        sys.stdout.flush()
    finally:
        sys.stdout = original
