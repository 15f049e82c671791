"""A command in a pseudo-terminal, its screen kept by pyte: a person at a terminal, for tests.

The command's stdin, stdout and stderr are the pty's slave end, so it sees a real
terminal of a fixed size (as `isatty()` and the window-size ioctl report it); keys are
bytes written to the master end, and the screen is what a VT100 would show.
Stdlib `pty` and `pyte` only, so it runs on a bare CI machine (no tmux).
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyte

from tests.support.processes import DEADLINE, default_signals

KEYS = {
    "enter": b"\r",
    "escape": b"\x1b",
    "ctrl+q": b"\x11",
    "ctrl+o": b"\x0f",
    "ctrl+j": b"\n",  # a line feed, in every terminal
    "f1": b"\x1bOP",
    "shift+enter": b"\x1b[13;2u",  # as terminals speaking kitty's keyboard protocol send it
}
BRACKETED_PASTE = 2004 << 5  # how pyte keeps a private mode (DECSET ?2004) in `screen.mode`


class Terminal:
    def __init__(
        self, argv: Sequence[str], *, size: tuple[int, int] = (120, 40), env: dict | None = None
    ) -> None:
        columns, lines = size
        self.screen = pyte.Screen(columns, lines)
        self._stream = pyte.ByteStream(self.screen)
        self._master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        self.process = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,  # the pty becomes its controlling terminal, as in a shell
            preexec_fn=default_signals,  # Ctrl-C, a hangup: as a terminal's shell leaves them
        )
        os.close(slave)
        self.hung_up = False

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill whatever is left of the command: its whole session (`specrun` runs its work in a
        child)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=DEADLINE)
        if not self.hung_up:
            os.close(self._master)

    def hang_up(self) -> None:
        """Close the terminal, as a closed window or a dropped ssh connection does."""
        os.close(self._master)
        self.hung_up = True

    def session(self) -> list[int]:
        """The processes still alive in the command's session (it and what it started)."""
        alive = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            state, _, _, session = stat[stat.rindex(")") + 2 :].split()[:4]
            if int(session) == self.process.pid and state != "Z":
                alive.append(int(entry))
        return alive

    # --- keys -------------------------------------------------------------------------------

    def type(self, text: str) -> None:
        os.write(self._master, text.encode())

    def paste(self, text: str) -> None:
        """Paste `text` as a terminal does: its line breaks as carriage returns, bracketed
        where the program turned bracketed paste mode on (a program that did not gets the
        text as if typed)."""
        pasted = text.replace("\r\n", "\r").replace("\n", "\r").encode()
        if BRACKETED_PASTE in self.screen.mode:
            pasted = b"\x1b[200~" + pasted + b"\x1b[201~"
        os.write(self._master, pasted)

    def press(self, *keys: str) -> None:
        for key in keys:
            os.write(self._master, KEYS[key])
            self.read(0.05)  # a lone Escape must not merge with the next key into a sequence

    # --- the screen -------------------------------------------------------------------------

    def read(self, seconds: float) -> None:
        """Feed the screen whatever the command writes during `seconds`."""
        deadline = time.monotonic() + seconds
        if self.hung_up:
            time.sleep(seconds)
            return
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._master], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: the command closed the terminal
                return
            if not data:
                return
            self._stream.feed(data)

    def drain_until(self, marker: str, timeout: float = 30.0) -> int:
        """Read until the raw output shows `marker`, not drawing the screen meanwhile (pyte
        costs far more CPU than the program it watches: a benchmark must not pay for it);
        the screen is drawn after. Returns the bytes read."""
        wanted, chunks, tail = marker.encode(), [], b""
        deadline = time.monotonic() + timeout
        while wanted not in tail:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {marker!r}")
            ready, _, _ = select.select([self._master], [], [], 0.5)
            if ready:
                chunks.append(os.read(self._master, 65536))
                tail = tail[-len(wanted) :] + chunks[-1]
        data = b"".join(chunks)
        self._stream.feed(data)
        return len(data)

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, condition: str | Callable[[str], bool], timeout: float = 30.0) -> str:
        """Read until the screen shows `condition` (a text, or a test of the screen's text)."""
        test = condition if callable(condition) else (lambda screen: condition in screen)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read(0.05)
            if test(screen := self.text()):
                return screen
        raise AssertionError(f"timed out waiting for {condition!r}; the screen:\n{self.text()}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self.read(0.05)
        return self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
