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
from specrun.system.files import REGULAR_FILE, what_is


class InvalidName(SpecrunError):
    """A repo id or a file name that could lead outside the repo's folder in the cache."""


# huggingface_hub's rule for a repo id: a `--` would also make two repos share one cache folder
# (models--a--b--c is a/b--c and a--b/c).
_REPO_PART = re.compile(r"\w(?:[\w.-]{0,94}\w)?")
_REVISION = re.compile(r"\w[\w.-]{0,254}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
MAIN = "main"  # the revision a name without one means, as huggingface_hub has it


def check_hub_names(repo: str, file: str | None = None, revision: str = MAIN) -> None:
    """Refuse a repo id, a file in it or a revision that the cache's paths could not hold safely:
    every path under the cache is built from these (a revision names a file under `refs/`), so
    this is the one check between a name and a path."""
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
    if file is not None:
        check_file_name(file)
    if not _REVISION.fullmatch(revision) or ".." in revision:
        raise InvalidName(
            f"'{revision}' is not a revision specrun takes: a branch, tag or commit of letters, "
            "digits, '-', '_' and '.', without '/' or '..'"
        )


def check_file_name(file: str) -> None:
    """Refuse a file name that could lead out of the folder it is joined to."""
    # Split on both separators, as huggingface_hub does: a name is also a path on Windows.
    if (
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
    """A GGUF in a Hub repo at a `revision` (a branch, tag or commit): an exact `file` (the first
    part of a split), or the one named with `quant`. `sha256` pins the content of each part, in
    order; empty where nothing could be checked. Its names are checked when it is made, so every
    cache path built from it stays in the cache."""

    repo: str
    file: str | None = None
    quant: str | None = None
    sha256: tuple[str, ...] = ()
    revision: str = MAIN

    def __post_init__(self) -> None:
        check_hub_names(self.repo, self.file, self.revision)


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


def cached_file(cache_dir: Path, repo: str, name: str, revision: str = MAIN) -> Path | None:
    if snapshot_dir(cache_dir, repo, revision) is None:  # huggingface_hub would read a bad ref
        return None
    found = try_to_load_from_cache(repo, name, cache_dir=cache_dir, revision=revision)
    return Path(found) if isinstance(found, str) else None


def cached_names(cache_dir: Path, repo: str, revision: str = MAIN) -> list[str]:
    """Complete files of the repo's cached snapshot of `revision` (dangling links, i.e. unfinished
    blobs, left out)."""
    snapshot = snapshot_dir(cache_dir, repo, revision)
    if snapshot is None:
        return []
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


def snapshot_dir(cache_dir: Path, repo: str, revision: str = MAIN) -> Path | None:
    """The cached snapshot of `revision`: the commit its ref names, or the commit it is; None
    where there is none, or the ref holds anything but a commit hash (damaged, or written by
    hand: it would name a folder anywhere)."""
    folder = repo_dir(cache_dir, repo)
    ref = folder / "refs" / revision
    if what_is(ref) == REGULAR_FILE:
        try:
            with ref.open("rb") as file:
                commit = file.read(100).decode("ascii", errors="replace").strip()
        except OSError:
            return None
    else:
        commit = revision
    snapshot = folder / "snapshots" / commit
    return snapshot if _COMMIT.fullmatch(commit) and snapshot.is_dir() else None
