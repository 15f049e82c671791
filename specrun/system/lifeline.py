"""A child process that ends with its parent: the `specrun` command's worker, the TUI's engine.

A parent killed outright (SIGKILL, the out-of-memory killer) runs no code, so only the
child can notice. Left alone it would live on: a worker holding the models' memory, an
`rpc-server` keeping its port and serving the next client. On Linux the kernel sends the
child SIGKILL when its parent dies (`prctl(PR_SET_PDEATHSIG)`); elsewhere a thread
watches the parent: its pid on macOS, its handle on Windows (which never gives a child
another parent, so the pid alone would not tell). SIGKILL, not a stop signal: the child
may have that signal ignored, or be stuck in a native call that no handler would interrupt.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 1.0  # without prctl: how often the thread looks at the parent's pid
SYNCHRONIZE, INFINITE = 0x00100000, 0xFFFFFFFF  # <windows.h>


def die_with_parent(parent: int) -> None:
    """In a child, right after it was started: end this process when `parent` dies."""
    if (
        sys.platform.startswith("linux")
        and hasattr(signal, "SIGKILL")
        and _parent_death_signal(signal.SIGKILL)
    ):
        # The parent may have died before the kernel was asked; then nothing will come.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return
    threading.Thread(target=_watch, args=(parent,), name="lifeline", daemon=True).start()


def _parent_death_signal(signum: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0)
    except (OSError, AttributeError):  # no libc to load, or no prctl in it
        return False


def _watch(parent: int) -> None:
    if sys.platform == "win32":
        kernel32 = ctypes.WinDLL("kernel32")
        handle = kernel32.OpenProcess(SYNCHRONIZE, False, parent)
        if handle:  # else the parent is gone already
            kernel32.WaitForSingleObject(handle, INFINITE)
    else:
        while os.getppid() == parent:  # a child whose parent died is given another
            time.sleep(WATCH_SECONDS)
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))  # Windows: no SIGKILL
