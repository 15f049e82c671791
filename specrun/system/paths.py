"""Where specrun keeps its files, as each platform has it (platformdirs): the XDG folders on
Linux (~/.cache/specrun, ~/.local/state/specrun, ~/.config/specrun, each moved by its
XDG_*_HOME), ~/Library on macOS, %LOCALAPPDATA%\\specrun on Windows."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "specrun"
CACHE_ENV = "SPECRUN_CACHE"  # the cache elsewhere: converted models, heads, llama.cpp wheels


def cache_dir() -> Path:
    """What can be made again: the demo pair, trained heads, the llama-cpp-python wheels."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return platformdirs.user_cache_path(APP, appauthor=False)


def state_dir() -> Path:
    """What specrun learned on this machine (auto's γ state)."""
    return platformdirs.user_state_path(APP, appauthor=False)


def config_dir() -> Path:
    """What the user writes (their models.toml)."""
    return platformdirs.user_config_path(APP, appauthor=False)
