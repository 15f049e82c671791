"""GGUF files of Hugging Face repos: found in huggingface_hub's cache, downloaded, removed.

A file already in the cache is used without any network access, and huggingface_hub only
links a file into a snapshot once its download is complete, so a partial one is never seen.
This module knows repos and files, not the catalog: callers pass the name the user gave
(`label`) for the messages.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator, Mapping
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

from huggingface_hub import HfApi, RepoFile, hf_hub_download, scan_cache_dir, try_to_load_from_cache
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    CacheNotFound,
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import disable_progress_bars
from huggingface_hub.utils import logging as hub_logging

from specrun.errors import Interrupted, SpecrunError
from specrun.formatting import format_size

# HfHubHTTPError derives from its HTTP client's base error and OSError; transport failures
# (DNS, refused, timeout, disk full) raise those, so catching the bases covers every way a
# download can fail without naming the HTTP client huggingface_hub happens to use.
_HUB_FAILURES = HfHubHTTPError.__bases__
HUB_PROBE_SECONDS = 3  # an unreachable Hub fails within this, not after the client's retries


class ModelNotFound(SpecrunError):
    """The spec names nothing that exists: no such alias, file, repo or quant."""


class NotCached(SpecrunError):
    """The model is not on disk and may not be downloaded now (offline, or a dry look)."""


class DownloadError(SpecrunError):
    """The Hub could not deliver a file, or the download was interrupted."""


@dataclass(frozen=True)
class HubRef:
    """A GGUF in a Hub repo: an exact `file` (the first part of a split), or the one named with `quant`."""

    repo: str
    file: str | None = None
    quant: str | None = None


_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})(?P<ext>\.gguf)$", re.I)


def split_parts(name: str) -> tuple[str, ...]:
    """All parts of a split GGUF (`x-00001-of-00003.gguf` ...) from any one of them; else just `name`."""
    match = _SPLIT.match(name)
    if match is None:
        return (name,)
    count = int(match["count"])
    return tuple(f"{match['stem']}-{i:05d}-of-{count:05d}{match['ext']}" for i in range(1, count + 1))


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, from the environment as it is now.

    huggingface_hub.constants are fixed when it is imported; the same variables, read at call
    time and passed as cache_dir=, let a caller (or a test) change them afterwards.
    """
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(cache)).expanduser()


def hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in {"1", "ON", "YES", "TRUE"} or hf_constants.is_offline_mode()


# --- what to fetch ------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedFile:
    name: str  # path inside the repo
    size: int | None  # bytes: on disk when cached, from the Hub when asked, else unknown
    cached: Path | None  # the complete file in the cache, or None


@dataclass(frozen=True)
class FetchPlan:
    repo: str
    files: tuple[PlannedFile, ...]

    @property
    def missing(self) -> tuple[PlannedFile, ...]:
        return tuple(f for f in self.files if f.cached is None)

    def check_room(self, folder: Path, free_bytes: int) -> None:
        """Refuse before the first byte when the files still to fetch cannot fit on the disk."""
        needed = sum(f.size or 0 for f in self.missing)
        if needed > free_bytes:
            raise DownloadError(f"{self.repo} needs {format_size(needed)} more on disk and {folder} has only "
                                f"{format_size(free_bytes)} free; free some space or set HF_HUB_CACHE to a "
                                "larger disk")


def free_bytes(folder: Path) -> int:
    """Free space where `folder` is, or will be once made."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def fetch_files(ref: HubRef, label: str, *, download: bool = True, progress: bool = True) -> tuple[Path, ...]:
    """The file's parts on disk, downloaded if `download` allows it and the Hub is not off."""
    network = download and not hub_offline()
    plan = plan_fetch(ref, label, network=network)
    if plan.missing and not network:
        raise _not_cached(ref, label, [f.name for f in plan.missing])
    cache_dir = hub_cache_dir()
    plan.check_room(cache_dir, free_bytes(cache_dir))
    return tuple(_download(plan, progress=progress))


def plan_fetch(ref: HubRef, label: str, *, network: bool) -> FetchPlan:
    """Which files `ref` needs and which are cached; asks the Hub only if something is missing."""
    cache_dir = hub_cache_dir()
    names = split_parts(ref.file) if ref.file else _pick_quant(ref, _cached_names(cache_dir, ref.repo))
    if names is not None:
        plan = _plan(ref.repo, names, cache_dir, sizes={})
        if not plan.missing or not network:
            return plan
    elif not network:
        raise _not_cached(ref, label, [])
    remote = _remote_sizes(ref.repo)
    names = names or _pick_quant(ref, remote)
    if names is None:
        raise ModelNotFound(f"no file in {ref.repo} matches {ref.quant}; its GGUF files: {_gguf_list(remote)}")
    plan = _plan(ref.repo, names, cache_dir, sizes=remote)
    absent = [f.name for f in plan.missing if f.name not in remote]
    if absent:
        raise ModelNotFound(f"{ref.repo} has no file {absent[0]}; its GGUF files: {_gguf_list(remote)}")
    return plan


def _plan(repo: str, names: Iterable[str], cache_dir: Path, *, sizes: Mapping[str, int]) -> FetchPlan:
    files = []
    for name in names:
        path = _cached_file(cache_dir, repo, name)
        files.append(PlannedFile(name, path.stat().st_size if path else sizes.get(name), path))
    return FetchPlan(repo, tuple(files))


def _cached_file(cache_dir: Path, repo: str, name: str) -> Path | None:
    found = try_to_load_from_cache(repo, name, cache_dir=cache_dir)
    return Path(found) if isinstance(found, str) else None


def _cached_names(cache_dir: Path, repo: str) -> list[str]:
    """Complete files of the repo's cached `main` snapshot (dangling links, i.e. unfinished blobs, left out)."""
    repo_dir = cache_dir / f"models--{repo.replace('/', '--')}"
    ref = repo_dir / "refs" / "main"
    snapshot = repo_dir / "snapshots" / ref.read_text().strip() if ref.is_file() else None
    if snapshot is None or not snapshot.is_dir():
        return []
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


def _pick_quant(ref: HubRef, names: Iterable[str]) -> tuple[str, ...] | None:
    """The GGUF whose name carries the quant (case-insensitive), a single file before a split one."""
    assert ref.quant is not None
    ggufs = [n for n in names if n.lower().endswith(".gguf") and not PurePosixPath(n).name.lower().startswith("mmproj")]
    # A whole-token match first, so Q4_0 is not Q4_0_4_4 and Q4_K_M is not IQ4_K_M.
    token = re.compile(rf"(?<![a-z0-9]){re.escape(ref.quant)}(?![a-z0-9_])", re.I)
    matches = [n for n in ggufs if token.search(PurePosixPath(n).name)] or [
        n for n in ggufs if ref.quant.lower() in PurePosixPath(n).name.lower()]
    groups = list(dict.fromkeys(split_parts(n) for n in matches))
    choices = [g for g in groups if len(g) == 1] or groups
    if len(choices) > 1:
        raise ModelNotFound(f"several files in {ref.repo} match {ref.quant}: "
                            f"{', '.join(g[0] for g in choices)}; name one as {ref.repo}/FILE")
    return choices[0] if choices else None


def _gguf_list(remote: Mapping[str, int]) -> str:
    ggufs = [n for n in remote if n.lower().endswith(".gguf")]
    return ", ".join(ggufs[:12]) + (", ..." if len(ggufs) > 12 else "") if ggufs else "none"


def _not_cached(ref: HubRef, label: str, names: list[str]) -> NotCached:
    files = names[0] + (f" (+{len(names) - 1} more parts)" if len(names) > 1 else "") if names else f"the {ref.quant} file"
    where = f"{ref.repo}: {files} is not in the Hugging Face cache ({hub_cache_dir()})"
    if hub_offline():
        return NotCached(f"{where} and HF_HUB_OFFLINE is set, so it cannot be downloaded; "
                         f"run `specrun models pull {label}` with the network on")
    return NotCached(f"{where}; run `specrun models pull {label}`")


# --- the network --------------------------------------------------------------------------


def _remote_sizes(repo: str) -> dict[str, int]:
    """The repo's files and sizes: the first thing any download asks the Hub."""
    check_hub_reachable()
    with _hub_errors(repo):
        return {item.path: item.size for item in HfApi().list_repo_tree(repo, recursive=True) if isinstance(item, RepoFile)}


def check_hub_reachable() -> None:
    """One quick connection to the Hub (or the proxy that reaches it), so that being offline
    is one line within seconds rather than half a minute of huggingface_hub's retries."""
    endpoint = hf_constants.ENDPOINT
    problem = _connection_problem(*_first_hop(endpoint))
    if problem:
        raise DownloadError(f"cannot reach the Hugging Face Hub at {endpoint} ({problem}); models already "
                            "in the cache work without it (HF_HUB_OFFLINE=1)")


def _first_hop(endpoint: str) -> tuple[str, int]:
    """The host and port a request to `endpoint` connects to: the endpoint's, or its proxy's."""
    url = urlsplit(endpoint)
    proxy = getproxies().get(url.scheme)
    if proxy and not proxy_bypass(url.hostname or ""):
        url = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)


@cache
def _connection_problem(host: str, port: int) -> str | None:
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
    except socket.timeout:
        return f"no answer within {HUB_PROBE_SECONDS} s"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _download(plan: FetchPlan, *, progress: bool) -> list[Path]:
    cache_dir = hub_cache_dir()
    paths = []
    for planned in plan.files:
        if planned.cached is None:
            if progress:
                print(f"Downloading {plan.repo}: {planned.name} ({format_size(planned.size)})", file=sys.stderr, flush=True)
            # huggingface_hub's bars go to stderr; the context silences them for this call only.
            with _hub_errors(plan.repo, planned.name), nullcontext() if progress else disable_progress_bars():
                paths.append(Path(hf_hub_download(plan.repo, planned.name, cache_dir=cache_dir)))
        else:
            paths.append(planned.cached)
    return paths


@contextmanager
def _hub_errors(repo: str, name: str | None = None) -> Iterator[None]:
    """huggingface_hub's exceptions as one-line messages that name the repo and file."""
    what = f"{repo}: {name}" if name else repo
    hub_logging.set_verbosity_error()  # not a warning per retry: the error line says what failed
    try:
        yield
    except GatedRepoError:
        raise DownloadError(f"{repo} is gated: accept its terms on https://huggingface.co/{repo} "
                            "and set HF_TOKEN (or run `hf auth login`)") from None
    except RepositoryNotFoundError:
        raise ModelNotFound(f"no Hugging Face repo {repo} (if it is private, set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise ModelNotFound(f"{repo} has no branch main") from None
    except LocalEntryNotFoundError:
        raise DownloadError(f"{what} is not in the Hugging Face cache and the Hub cannot be reached") from None
    except EntryNotFoundError:
        raise ModelNotFound(f"{repo} has no file {name}") from None
    except KeyboardInterrupt:
        raise Interrupted(f"download of {what} interrupted; nothing partial was kept, "
                          "run the command again to fetch it") from None
    except _HUB_FAILURES as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, OSError):  # an HTTP error status, or the disk
            raise DownloadError(f"{what}: download failed: {detail}") from None
        raise DownloadError(f"cannot reach the Hugging Face Hub for {what} ({detail}); models already "
                            "in the cache work without it (HF_HUB_OFFLINE=1)") from None


# --- removal ------------------------------------------------------------------------------


def delete_cached(ref: HubRef, label: str) -> int:
    """Delete `ref`'s files from the Hugging Face cache; returns the bytes freed."""
    cache_dir = hub_cache_dir()
    names = set(split_parts(ref.file) if ref.file else _pick_quant(ref, _cached_names(cache_dir, ref.repo)) or ())
    try:
        cache = scan_cache_dir(cache_dir)
    except CacheNotFound:
        cache = None
    files = [] if cache is None else [
        cached for repo in cache.repos if repo.repo_id == ref.repo and repo.repo_type == "model"
        for revision in repo.revisions for cached in revision.files
        if cached.file_path.relative_to(revision.snapshot_path).as_posix() in names]
    if cache is None or not files:
        raise NotCached(f"{label} is not in the Hugging Face cache ({cache_dir}); nothing to remove")
    strategy = cache.delete_files(*files)
    strategy.execute()
    return strategy.expected_freed_size
