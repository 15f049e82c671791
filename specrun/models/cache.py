"""huggingface_hub's cache on disk: where it is, the names that may become paths in it, and
what a repo holds there. Every cache path is built from a `HubRef`, whose names are checked
when it is made: the one check between a name the user typed and a path."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from huggingface_hub import try_to_load_from_cache

from specrun.errors import SpecrunError


class InvalidName(SpecrunError):
    """A repo id or a file name that could lead outside the repo's folder in the cache."""


# huggingface_hub's rule for a repo id: a `--` would also make two repos share one cache folder
# (models--a--b--c is a/b--c and a--b/c).
_REPO_PART = re.compile(r"\w(?:[\w.-]{0,94}\w)?")


def check_hub_names(repo: str, file: str | None = None) -> None:
    """Refuse a repo id or a file in it that the cache's paths could not hold safely: every path
    under the cache is built from these, so this is the one check between a name and a path."""
    parts = repo.split("/")
    if (
        len(parts) != 2
        or not all(_REPO_PART.fullmatch(part) for part in parts)
        or "--" in repo
        or ".." in repo
    ):
        raise InvalidName(
            f"'{repo}' is not a Hugging Face repo id: ORG/NAME of letters, digits, '-', '_' and "
            "'.', without '--' or '..'"
        )
    # Split on both separators, as huggingface_hub does: a name is also a path on Windows.
    if file is not None and (
        any(part in ("", ".", "..") for part in file.replace("\\", "/").split("/"))
        or PureWindowsPath(file).drive
        or "\0" in file
    ):
        raise InvalidName(
            f"'{file}' is not a file in a repo: that is a relative path without '.', '..', "
            "empty parts or a drive"
        )


@dataclass(frozen=True)
class HubRef:
    """A GGUF in a Hub repo: an exact `file` (the first part of a split), or the one named with
    `quant`. `sha256` pins the content of each part, in order; empty where nothing could be
    checked. Its names are checked when it is made, so every cache path built from it stays in the
    cache."""

    repo: str
    file: str | None = None
    quant: str | None = None
    sha256: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_hub_names(self.repo, self.file)


_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})(?P<ext>\.gguf)$", re.I)


def split_parts(name: str) -> tuple[str, ...]:
    """All parts of a split GGUF (`x-00001-of-00003.gguf` ...) from any one of them; else just
    `name`."""
    match = _SPLIT.match(name)
    if match is None:
        return (name,)
    count = int(match["count"])
    return tuple(
        f"{match['stem']}-{i:05d}-of-{count:05d}{match['ext']}" for i in range(1, count + 1)
    )


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, from the environment as it is now.

    huggingface_hub.constants are fixed when it is imported; the same variables, read at call
    time and passed as cache_dir=, let a caller (or a test) change them afterwards.
    """
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"
    )
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(cache)).expanduser()


def repo_dir(cache_dir: Path, repo: str) -> Path:
    return cache_dir / f"models--{repo.replace('/', '--')}"


def cached_file(cache_dir: Path, repo: str, name: str) -> Path | None:
    found = try_to_load_from_cache(repo, name, cache_dir=cache_dir)
    return Path(found) if isinstance(found, str) else None


def cached_names(cache_dir: Path, repo: str) -> list[str]:
    """Complete files of the repo's cached `main` snapshot (dangling links, i.e. unfinished blobs,
    left out)."""
    folder = repo_dir(cache_dir, repo)
    ref = folder / "refs" / "main"
    snapshot = folder / "snapshots" / ref.read_text().strip() if ref.is_file() else None
    if snapshot is None or not snapshot.is_dir():
        return []
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())
