"""GGUF files of Hugging Face repos: found in huggingface_hub's cache, downloaded, checked, removed.

A file already in the cache is used without any network access, and huggingface_hub only
links a file into a snapshot once its download is complete, so a partial one is never seen.
Before a file is used its sha256 is checked against a pin from the catalog, else against the
one recorded in the lock file beside the cache at its first download (trust on first use).
This module knows repos and files, not the catalog: callers pass the name the user gave
(`label`) for the messages.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import socket
import sys
import traceback
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

from huggingface_hub import constants as hf_constants
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status, http_backoff
from huggingface_hub.utils import logging as hub_logging
from huggingface_hub.utils.tqdm import (  # where they are defined: utils exports them lazily
    are_progress_bars_disabled,
    disable_progress_bars,
    enable_progress_bars,
)

from specrun.errors import Interrupted, SpecrunError
from specrun.models.cache import (
    MAIN,
    HubRef,
    cached_file,
    cached_names,
    hub_cache_dir,
    repo_dir,
    split_parts,
)
from specrun.models.lock import IntegrityError, LockRecord, check_integrity, forget, read_lock
from specrun.system.formatting import format_size
from specrun.system.interrupts import exit_status

# HfHubHTTPError derives from its HTTP client's base error (requests' is an OSError, httpx's
# is not); transport failures raise that base, the disk raises OSError and hf_xet raises
# RuntimeError. Together they cover every way a download fails, whichever HTTP client the
# installed huggingface_hub uses.
_HUB_FAILURES: tuple[type[Exception], ...] = (
    *(base for base in HfHubHTTPError.__bases__ if issubclass(base, Exception)),
    OSError,
    RuntimeError,
)
_LOGIN = "set HF_TOKEN or run `hf auth login` (`huggingface-cli login` before huggingface_hub 1.0)"
HUB_PROBE_SECONDS = 3  # an unreachable Hub fails within this, not after the client's retries


class ModelNotFound(SpecrunError):
    """The spec names nothing that exists: no such alias, file, repo or quant."""


class NotCached(SpecrunError):
    """The model is not on disk and may not be downloaded now (offline, or a dry look)."""


class DownloadError(SpecrunError):
    """The Hub could not deliver a file, or the download was interrupted."""


def hub_endpoint() -> str:
    """The Hub's address from the environment as it is now (huggingface_hub reads it at import)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_offline() -> bool:
    """Offline if the environment says so now, or said so when huggingface_hub was imported
    (its own switch, which it keeps checking)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in {"1", "ON", "YES", "TRUE"} or hf_constants.HF_HUB_OFFLINE


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
    revision: str = MAIN

    @property
    def missing(self) -> tuple[PlannedFile, ...]:
        return tuple(f for f in self.files if f.cached is None)

    def check_room(self, folder: Path, free_bytes: int) -> None:
        """Refuse before the first byte when the files still to fetch cannot fit on the disk."""
        needed = sum(f.size or 0 for f in self.missing)
        if needed > free_bytes:
            raise DownloadError(
                f"{self.repo} needs {format_size(needed)} more on disk and {folder} has only "
                f"{format_size(free_bytes)} free; free some space or set HF_HUB_CACHE to a "
                "larger disk"
            )


def free_bytes(folder: Path) -> int:
    """Free space where `folder` is, or will be once made."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def fetch_files(
    ref: HubRef, label: str, *, download: bool = True, progress: bool = True
) -> tuple[Path, ...]:
    """The file's parts on disk, downloaded if `download` allows it and the Hub is not off.

    `download` also means the files are about to be used, so their sha256 is checked first."""
    network = download and not hub_offline()
    plan = plan_fetch(ref, label, network=network)
    if plan.missing and not network:
        raise _not_cached(ref, label, [f.name for f in plan.missing])
    cache_dir = hub_cache_dir()
    plan.check_room(cache_dir, free_bytes(cache_dir))
    paths = tuple(_download(plan, progress=progress))
    if download:
        _check_parts(ref, plan, paths, label, progress=progress, rehash=False)
    return paths


def verify_cached(ref: HubRef, label: str) -> list[tuple[str, LockRecord | IntegrityError]]:
    """Hash every one of `ref`'s cached files again, whatever their size and mtime: (name, lock
    record) of each, or (name, why it is refused), so a bad part does not hide the others."""
    plan = plan_fetch(ref, label, network=False)
    if plan.missing:
        raise _not_cached(ref, label, [f.name for f in plan.missing])
    read_lock()  # a lock file that cannot be read is one error, not one per file
    pins = ref.sha256 or (None,) * len(plan.files)
    checked: list[tuple[str, LockRecord | IntegrityError]] = []
    for planned, pin in zip(plan.files, pins):
        assert planned.cached is not None  # none is missing
        try:
            checked.append(
                (
                    planned.name,
                    check_integrity(
                        plan.repo,
                        planned.name,
                        planned.cached,
                        label,
                        pin=pin,
                        progress=True,
                        rehash=True,
                        revision=plan.revision,
                    ),
                )
            )
        except IntegrityError as problem:
            checked.append((planned.name, problem))
    return checked


def _check_parts(
    ref: HubRef, plan: FetchPlan, paths: Iterable[Path], label: str, *, progress: bool, rehash: bool
) -> list[LockRecord]:
    pins = ref.sha256 or (None,) * len(plan.files)
    return [
        check_integrity(
            plan.repo,
            planned.name,
            path,
            label,
            pin=pin,
            progress=progress,
            rehash=rehash,
            revision=plan.revision,
        )
        for planned, path, pin in zip(plan.files, paths, pins)
    ]


def plan_fetch(ref: HubRef, label: str, *, network: bool) -> FetchPlan:
    """Which files `ref` needs and which are cached; asks the Hub only if something is missing."""
    cache_dir = hub_cache_dir()
    names = (
        split_parts(ref.file)
        if ref.file
        else _pick_quant(ref, cached_names(cache_dir, ref.repo, ref.revision))
    )
    if names is not None:
        plan = _plan(ref.repo, names, cache_dir, sizes={}, revision=ref.revision)
        if not plan.missing or not network:
            return plan
    elif not network:
        raise _not_cached(ref, label, [])
    remote = _remote_sizes(ref.repo, ref.revision)
    names = names or _pick_quant(ref, remote)
    where = ref.repo if ref.revision == MAIN else f"{ref.repo} at {ref.revision}"
    if names is None:
        raise ModelNotFound(
            f"no file in {where} matches {ref.quant}; its GGUF files: {_gguf_list(remote)}"
        )
    plan = _plan(ref.repo, names, cache_dir, sizes=remote, revision=ref.revision)
    absent = [f.name for f in plan.missing if f.name not in remote]
    if absent:
        raise ModelNotFound(
            f"{where} has no file {absent[0]}; its GGUF files: {_gguf_list(remote)}"
        )
    return plan


# A rule that picks the files to fetch from a repo's file list, or None where the list lacks
# something it needs (a checkpoint without weights, a tokenizer-less repo).
Pick = Callable[[Collection[str]], "tuple[str, ...] | None"]


def plan_picked(repo: str, pick: Pick, what: str, label: str, *, network: bool) -> FetchPlan:
    """The files `pick` chooses from `repo` (`what` names them in messages), and which are
    cached; the Hub is asked only when the cache does not already hold all of them."""
    cache_dir = hub_cache_dir()
    names = pick(cached_names(cache_dir, repo))
    if names is not None:
        plan = _plan(repo, names, cache_dir, sizes={})
        if not plan.missing:
            return plan
    if not network:
        where = f"{repo}: {what} is not in the Hugging Face cache ({cache_dir})"
        if hub_offline():
            raise NotCached(
                f"{where} and HF_HUB_OFFLINE is set, so it cannot be downloaded; "
                f"run `specrun models pull {label}` with the network on"
            )
        raise NotCached(f"{where}; run `specrun models pull {label}`")
    remote = _remote_sizes(repo)
    names = pick(remote)
    if names is None:
        listed = ", ".join(list(remote)[:12]) + (", ..." if len(remote) > 12 else "")
        raise ModelNotFound(f"{repo} has no {what}; its files: {listed or 'none'}")
    return _plan(repo, names, cache_dir, sizes=remote)


def fetch_picked(
    plans: Iterable[FetchPlan], label: str, *, progress: bool
) -> list[tuple[Path, ...]]:
    """Download the plans' missing files (room for all of them checked first) and check each
    file's sha256 against the lock (the Hub's LFS hash at the first download)."""
    plans = list(plans)
    cache_dir = hub_cache_dir()
    FetchPlan(label, tuple(f for p in plans for f in p.files)).check_room(
        cache_dir, free_bytes(cache_dir)
    )
    fetched = []
    for plan in plans:
        paths = _download(plan, progress=progress)
        for planned, path in zip(plan.files, paths):
            check_integrity(
                plan.repo,
                planned.name,
                path,
                label,
                pin=None,
                progress=progress,
                rehash=False,
                revision=plan.revision,
            )
        fetched.append(tuple(paths))
    return fetched


def _plan(
    repo: str,
    names: Iterable[str],
    cache_dir: Path,
    *,
    sizes: Mapping[str, int],
    revision: str = MAIN,
) -> FetchPlan:
    files = []
    for name in names:
        path = cached_file(cache_dir, repo, name, revision)
        files.append(PlannedFile(name, path.stat().st_size if path else sizes.get(name), path))
    return FetchPlan(repo, tuple(files), revision)


def _pick_quant(ref: HubRef, names: Iterable[str]) -> tuple[str, ...] | None:
    """The GGUF whose name carries the quant (case-insensitive), a single file before a split
    one."""
    assert ref.quant is not None
    ggufs = [
        n
        for n in names
        if n.lower().endswith(".gguf") and not PurePosixPath(n).name.lower().startswith("mmproj")
    ]
    # A whole-token match first, so Q4_0 is not Q4_0_4_4 and Q4_K_M is not IQ4_K_M.
    token = re.compile(rf"(?<![a-z0-9]){re.escape(ref.quant)}(?![a-z0-9_])", re.I)
    matches = [n for n in ggufs if token.search(PurePosixPath(n).name)] or [
        n for n in ggufs if ref.quant.lower() in PurePosixPath(n).name.lower()
    ]
    groups = list(dict.fromkeys(split_parts(n) for n in matches))
    choices = [g for g in groups if len(g) == 1] or groups
    if len(choices) > 1:
        raise ModelNotFound(
            f"several files in {ref.repo} match {ref.quant}: "
            f"{', '.join(g[0] for g in choices)}; name one as {ref.repo}/FILE"
        )
    return choices[0] if choices else None


def _gguf_list(remote: Mapping[str, int]) -> str:
    ggufs = [n for n in remote if n.lower().endswith(".gguf")]
    return ", ".join(ggufs[:12]) + (", ..." if len(ggufs) > 12 else "") if ggufs else "none"


def _not_cached(ref: HubRef, label: str, names: list[str]) -> NotCached:
    files = (
        names[0] + (f" (+{len(names) - 1} more parts)" if len(names) > 1 else "")
        if names
        else f"the {ref.quant} file"
    )
    where = f"{ref.repo}: {files} is not in the Hugging Face cache ({hub_cache_dir()})"
    if hub_offline():
        return NotCached(
            f"{where} and HF_HUB_OFFLINE is set, so it cannot be downloaded; "
            f"run `specrun models pull {label}` with the network on"
        )
    return NotCached(f"{where}; run `specrun models pull {label}`")


# --- the network --------------------------------------------------------------------------


def _remote_sizes(repo: str, revision: str = MAIN) -> dict[str, int]:
    """The repo's files and sizes: the first thing any download asks the Hub.

    Asked here rather than with HfApi.list_repo_tree, which sets no deadline (a Hub that takes
    the connection and never answers hangs it) and retries a silent Hub for half a minute; this
    goes through huggingface_hub's session, headers and errors all the same."""
    check_hub_reachable()
    endpoint, seconds = hub_endpoint(), hf_constants.HF_HUB_DOWNLOAD_TIMEOUT
    url: str | None = f"{endpoint}/api/models/{repo}/tree/{revision}"
    params: dict[str, Any] | None = {"recursive": True, "expand": False}
    sizes: dict[str, int] = {}
    with _hub_errors(repo, revision=revision):
        while url:
            try:
                response = http_backoff(
                    "GET",
                    url,
                    params=params,
                    headers=build_hf_headers(),
                    timeout=seconds,
                    retry_on_exceptions=(),
                )
            except _HUB_FAILURES as exc:
                if _timed_out(exc):
                    raise DownloadError(
                        f"the Hugging Face Hub at {endpoint} did not answer within {seconds} s "
                        f"(HF_HUB_DOWNLOAD_TIMEOUT); {_USE_THE_CACHE}"
                    ) from None
                raise
            hf_raise_for_status(response)
            try:
                sizes.update(_listed_files(response.json()))
            except ValueError:
                kind = response.headers.get("Content-Type") or "no Content-Type"
                raise DownloadError(
                    f"the Hugging Face Hub at {endpoint} answered with something other than the "
                    f"file list of {repo} ({kind}): a captive portal or a proxy's login page? "
                    f"Check the network and HF_ENDPOINT; {_USE_THE_CACHE}"
                ) from None
            url, params = response.links.get("next", {}).get("url"), None  # the next page
    return sizes


_USE_THE_CACHE = "models already in the cache work without it (HF_HUB_OFFLINE=1)"


def _listed_files(items: Any) -> dict[str, int]:
    """Path and size of each file in a page of the Hub's listing; ValueError if it is none."""
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError("not a list of entries")
    files = [item for item in items if item.get("type") == "file"]
    if not all(isinstance(f.get("path"), str) and isinstance(f.get("size"), int) for f in files):
        raise ValueError("an entry without a path or a size")
    return {f["path"]: f["size"] for f in files}


def _timed_out(exc: BaseException) -> bool:
    """A deadline passed: httpx's TimeoutException, requests' Timeout (huggingface_hub before
    1.0) or the socket's TimeoutError, whichever client made the request."""
    names = {"TimeoutException", "Timeout", "TimeoutError"}
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def check_hub_reachable() -> None:
    """One quick connection to the Hub (or the proxy that reaches it), so that being offline
    is one line within seconds rather than half a minute of huggingface_hub's retries."""
    endpoint = hub_endpoint()
    problem = _connection_problem(*_first_hop(endpoint))
    if problem:
        raise DownloadError(
            f"cannot reach the Hugging Face Hub at {endpoint} ({problem}); {_USE_THE_CACHE}"
        )


def _first_hop(endpoint: str) -> tuple[str, int]:
    """The host and port a request to `endpoint` connects to: the endpoint's, or its proxy's."""
    url = urlsplit(endpoint)
    proxy = getproxies().get(url.scheme)
    if proxy and not proxy_bypass(url.hostname or ""):
        url = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)


def _connection_problem(host: str, port: int) -> str | None:
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
    except TimeoutError:
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
                print(
                    f"Downloading {plan.repo}: {planned.name} ({format_size(planned.size)})",
                    file=sys.stderr,
                    flush=True,
                )
            with (
                _hub_errors(plan.repo, planned, revision=plan.revision),
                nullcontext() if progress else _no_progress_bars(),
            ):
                paths.append(
                    Path(
                        hf_hub_download(
                            plan.repo,
                            planned.name,
                            revision=plan.revision,
                            cache_dir=cache_dir,
                            endpoint=hub_endpoint(),
                        )
                    )
                )
        else:
            paths.append(planned.cached)
    return paths


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """huggingface_hub's bars off for one call: its switch is global, and only recent releases
    make it a context manager."""
    already_off = are_progress_bars_disabled()
    disable_progress_bars()
    try:
        yield
    finally:
        if not already_off:
            enable_progress_bars()


@contextmanager
def _hub_errors(
    repo: str, planned: PlannedFile | None = None, *, revision: str = MAIN
) -> Iterator[None]:
    """huggingface_hub's exceptions as one-line messages that name the repo and file and, for a
    download cut short, what the next run will fetch."""
    what = f"{repo}: {planned.name}" if planned else repo
    # Not a warning per retry: the error line says what failed.
    hub_logging.set_verbosity(logging.ERROR)
    try:
        with (
            warnings.catch_warnings()
        ):  # its disk space warning too: check_room said it before the first byte
            warnings.filterwarnings("ignore", category=UserWarning, module="huggingface_hub")
            yield
    except GatedRepoError:
        raise DownloadError(
            f"{repo} is gated: accept its terms on {hub_endpoint()}/{repo} and {_LOGIN}"
        ) from None
    except RepositoryNotFoundError:
        raise ModelNotFound(
            f"no Hugging Face repo {repo}, or it is private and needs a token: {_LOGIN}"
        ) from None
    except RevisionNotFoundError:
        raise ModelNotFound(f"{repo} has no branch, tag or commit {revision}") from None
    except (
        LocalEntryNotFoundError
    ) as exc:  # huggingface_hub's word for any failure of the metadata request
        if isinstance(exc.__cause__, _HUB_FAILURES):
            raise DownloadError(_failure_line(exc.__cause__, repo, planned)) from None
        raise DownloadError(
            f"{what} is not in the Hugging Face cache and the Hub cannot be reached"
        ) from None
    except EntryNotFoundError:
        raise ModelNotFound(f"{what}: no such file in the repo") from None
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP (specrun.system.interrupts)
        raise Interrupted(
            f"download of {what} interrupted; {_next_run(repo, planned)}", exit_status(stop)
        ) from None
    except _HUB_FAILURES as exc:
        raise DownloadError(_failure_line(exc, repo, planned)) from None


def _failure_line(exc: BaseException, repo: str, planned: PlannedFile | None) -> str:
    """What failed and the fix, for an HTTP status, the disk, Xet storage, the connection or
    anything else."""
    what = f"{repo}: {planned.name}" if planned else repo
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    detail = _status_text(response) if status is not None else _first_line(exc)
    if status in (401, 403):
        return f"{what}: the Hub refused access ({detail}); {_LOGIN}"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"{what}: the disk is full ({hub_cache_dir()}); free some space or set HF_HUB_CACHE "
            f"to a larger disk; {_next_run(repo, planned)}"
        )
    if isinstance(exc, RuntimeError) and _raised_in(exc, "xet_get"):
        return (
            f"{what}: the download from Xet storage failed ({detail}); HF_HUB_DISABLE_XET=1 "
            f"downloads over plain HTTPS instead; {_next_run(repo, planned)}"
        )
    if status is not None:
        return f"{what}: the Hub answered {detail}; {_next_run(repo, planned)}"
    return (
        f"{what}: the download from {hub_endpoint()} failed ({detail}); {_next_run(repo, planned)}"
    )


def _status_text(response: Any) -> str:
    """`HTTP 403 Forbidden: <the Hub's own message>`, whether requests or httpx made the
    response."""
    reason = getattr(response, "reason_phrase", None) or getattr(response, "reason", "")
    message = response.headers.get("X-Error-Message")
    return f"HTTP {response.status_code} {reason}" + (f": {message}" if message else "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _raised_in(exc: BaseException, function: str) -> bool:
    return any(
        frame.f_code.co_name == function for frame, _ in traceback.walk_tb(exc.__traceback__)
    )


def _next_run(repo: str, planned: PlannedFile | None) -> str:
    """Whether the next run resumes the file or starts it over: huggingface_hub before 1.x keeps
    `<etag>.incomplete` and resumes from it; later releases delete their partial file."""
    if planned is None:
        return "run the command again"
    partials = list((repo_dir(hub_cache_dir(), repo) / "blobs").glob("*.incomplete"))
    done = max((p.stat().st_size for p in partials), default=0)
    if done:
        return f"the next run resumes from {format_size(done)} of {format_size(planned.size)}"
    return f"the next run starts over and fetches all {format_size(planned.size)} again"


# --- removal ------------------------------------------------------------------------------


def delete_cached(ref: HubRef, label: str) -> int:
    """Delete `ref`'s files from every cached snapshot of its repo; returns the bytes freed.

    Only what lies in the repo's own folder goes, as with huggingface_hub's own delete: each
    snapshot's entry, and the blob under `blobs/` it links to unless another entry still does.
    An entry linking to a file elsewhere (a user's own file, linked in) loses the link only."""
    cache_dir = hub_cache_dir()
    names = set(
        split_parts(ref.file)
        if ref.file
        else _pick_quant(ref, cached_names(cache_dir, ref.repo, ref.revision)) or ()
    )
    freed = delete_cached_names(ref.repo, names)
    if freed is None:
        raise NotCached(
            f"{label} is not in the Hugging Face cache ({cache_dir}); nothing to remove"
        )
    return freed


def delete_cached_names(repo: str, names: Collection[str]) -> int | None:
    """Delete these files of `repo` from every cached snapshot, as `delete_cached` does; the
    bytes freed, or None where none of them was cached."""
    folder = repo_dir(hub_cache_dir(), repo)
    snapshots = folder / "snapshots"
    # Resolved, so a linked folder on the way (the cache moved to another disk) is still inside.
    real_snapshots, real_blobs = snapshots.resolve(), (folder / "blobs").resolve()
    entries = [
        path
        for snapshot in snapshots.glob("*")
        for name in names
        if (path := snapshot / name).is_file()
        and path.parent.resolve().is_relative_to(real_snapshots)
    ]
    if not entries:
        return None
    kept = {
        path.resolve() for path in snapshots.rglob("*") if path.is_file() and path not in entries
    }
    linked = {path.resolve() for path in entries if path.is_symlink()}
    blobs = {blob for blob in linked - kept if blob.parent == real_blobs}
    copies = [path for path in entries if not path.is_symlink()]  # their own blob, where no links
    freed = sum(path.stat().st_size for path in [*blobs, *copies])
    for path in [*entries, *blobs]:
        path.unlink(missing_ok=True)
    forget(repo, names)
    return freed
