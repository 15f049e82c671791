"""llama.cpp's process-wide state: the backend's one-time start, its log (quiet unless
verbose, its last lines kept to explain a failed load) and the load-progress callback
through which Ctrl-C stops a load."""

from __future__ import annotations

import ctypes
import os
from collections import deque

import llama_cpp as llama

from specrun.system.interrupts import native_callback, stop_requested

_log_lines: deque[str] = deque(maxlen=20)
_verbose_log = False


@native_callback
def _log(level: int, text: bytes, user_data: int | None) -> None:
    line = text.decode("utf-8", errors="replace")
    if _verbose_log:
        os.write(2, text)
    elif line.strip():
        _log_lines.append(line.strip())  # kept to explain a failed load


# The C function pointers llama.cpp calls, kept alive here for as long as it may call them.
_log_callback = llama.llama_log_callback(_log)

_backend_ready = False


@native_callback
def _progress(progress: float, user_data: int | None) -> bool:
    return not stop_requested()  # false: llama.cpp stops loading, so Ctrl-C is not a long wait


_load_progress = llama.llama_progress_callback(_progress)


def log_lines() -> list[str]:
    """llama.cpp's last log lines since `clear_log`."""
    return list(_log_lines)


def clear_log() -> None:
    _log_lines.clear()


def verbose() -> bool:
    return _verbose_log


def set_verbose(verbose: bool) -> None:
    """Show llama.cpp's log on stderr if `verbose`; otherwise keep it quiet."""
    global _verbose_log
    _verbose_log = verbose
    start_backend()


def start_backend() -> None:
    """llama.cpp's backends started once, its log ours first: a backend's own lines at start
    (ggml-vulkan lists its devices) go where the rest of the log goes, not to stderr."""
    global _backend_ready
    llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
    if not _backend_ready:
        llama.llama_backend_init()
        _backend_ready = True


def load_progress_callback() -> ctypes._CFunctionType:
    """The callback a model's parameters carry: false (stop loading) once Ctrl-C came."""
    return _load_progress
