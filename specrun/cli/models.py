"""`specrun models`: list, pull, verify, show and rm the catalog's models.

Tables and answers go to stdout, downloads' progress and errors to stderr.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import typer

from specrun.errors import SpecrunError, report
from specrun.llama.gguf import GGUFFileError, check_gguf_file, read_gguf_info
from specrun.models.catalog import (
    KIND_NOUNS,
    Catalog,
    CatalogEntry,
    ModelSpec,
    cached_model,
    cached_models,
    downloaded_models,
    fetch_model,
    load_catalog,
    parse_spec,
    remove_cached,
    verify_model,
)
from specrun.models.convert import (
    CONVERT_EXTRA,
    CONVERTER_SCRIPT,
    missing_modules,
    plan_conversion,
)
from specrun.models.hub import FetchPlan, ModelNotFound, NotCached, hub_offline, plan_fetch
from specrun.models.lock import IntegrityError
from specrun.system.formatting import format_or_dash, format_size

app = typer.Typer(
    help="List, download, verify, inspect and remove the catalog's models.", no_args_is_help=True
)


@dataclass(frozen=True)
class _Options:
    catalog_file: Path | None


@app.callback()
def models(
    ctx: typer.Context,
    catalog: Path | None = typer.Option(
        None,
        "--catalog",
        dir_okay=False,
        help="A models.toml that adds or overrides aliases "
        "(default: models.toml in specrun's config folder if present: "
        "~/.config/specrun on Linux, as `specrun doctor` shows).",
    ),
) -> None:
    ctx.obj = _Options(catalog)


@contextmanager
def _reported_errors() -> Iterator[None]:
    """A SpecrunError becomes its one line on stderr, also where cli.main is not the caller."""
    try:
        yield
    except SpecrunError as error:
        raise typer.Exit(report(error)) from None


def _catalog(ctx: typer.Context) -> Catalog:
    return load_catalog(ctx.obj.catalog_file)


@app.command("list")
def list_models(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One JSON array on stdout."),
) -> None:
    """Every alias with its family, size, whether it is already on disk, and how it drafts:
    `auto` (a recommended draft), `eagle3` (an EAGLE-3 head), `dflash` (a block draft), `mtp`
    (its own MTP layers); then every other model downloaded (`REPO:QUANT`, `REPO/FILE.gguf`),
    by the name that runs it."""
    with _reported_errors():
        catalog = _catalog(ctx)
        rows = []
        for entry in catalog.entries.values():
            model = cached_model(parse_spec(entry.alias, catalog))
            fields = asdict(entry)
            fields["for"] = fields.pop("targets")  # as models.toml spells it
            rows.append(
                {
                    **fields,
                    "heads": catalog.heads_for(entry) if not entry.needs_target else [],
                    "blocks": catalog.blocks_for(entry) if not entry.needs_target else [],
                    "cached": model is not None,
                    "path": str(model.path) if model else None,
                    "catalog": True,
                }
            )
        rows += [_download_row(spec) for spec in cached_models(catalog) if spec.entry is None]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    header = ("ALIAS", "FAMILY", "PARAMS", "QUANT", "SIZE", "CACHED", "DRAFTING")
    table = [header] + [
        (
            row["alias"],
            row["family"] or "-",
            row["params"] or "-",
            row["quant"] or "-",
            format_or_dash(row["size_gb"], ".2f", " GB"),
            "yes" if row["cached"] else "-",
            _drafting(catalog, catalog.entries[row["alias"]])
            if row["alias"] in catalog.entries
            else "-",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def _download_row(spec: ModelSpec) -> dict[str, object]:
    """A downloaded model outside the catalog, as `list` shows it: named as `--target` takes
    it (REPO/FILE.gguf), its architecture and size read from its files on disk."""
    model = cached_model(spec)
    assert model is not None and spec.hub is not None  # downloaded_models lists cached ones
    try:
        family: str | None = read_gguf_info(model.path).architecture
    except GGUFFileError:  # `models verify` says what is wrong with it
        family = None
    return {
        "alias": spec.text,
        "family": family,
        "repo": spec.hub.repo,
        "file": spec.hub.file,
        "quant": _quant_of(spec.hub.file or ""),
        "params": None,
        "size_gb": sum(part.stat().st_size for part in model.parts) / 1e9,
        "kind": "model",
        "cached": True,
        "path": str(model.path),
        "catalog": False,
    }


def _quant_of(file: str) -> str | None:
    """The quantization a GGUF's file name states, as the Hub's files name it (`-Q4_K_M.gguf`)."""
    match = _QUANT_IN_NAME.search(file)
    return match[1].upper() if match else None


_QUANT_IN_NAME = re.compile(
    r"[-_.]((?:I?Q\d[\w]*?)|F16|F32|BF16)(?:-\d{5}-of-\d{5})?\.gguf$", re.IGNORECASE
)


def _drafting(catalog: Catalog, entry: CatalogEntry) -> str:
    """How the catalog drafts for a target (the --draft values it fills in), or a head's or a
    block draft's role."""
    if entry.needs_target:
        return f"{KIND_NOUNS[entry.kind]} for {', '.join(entry.targets)}"
    ways = [
        way
        for way, offered in (
            ("auto", entry.drafts),
            ("eagle3", catalog.heads_for(entry)),
            ("dflash", catalog.blocks_for(entry)),
            ("mtp", entry.mtp),
        )
        if offered
    ]
    return ", ".join(ways) or "-"


@app.command()
def pull(
    ctx: typer.Context,
    specs: list[str] = typer.Argument(
        ..., metavar="ALIAS...", help="Aliases (or REPO:QUANT, REPO/FILE.gguf)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Only show what would be fetched, and its size."
    ),
) -> None:
    """Download models into the Hugging Face cache (the demo pair: prepare it)."""
    with _reported_errors():
        catalog = _catalog(ctx)
        parsed = [
            parse_spec(spec, catalog) for spec in specs
        ]  # every name checked before any download
        for spec in parsed:
            _check_local_gguf(spec)
        for spec in parsed:
            if dry_run:
                _print_plan(spec)
            else:
                print(f"{spec.text}: {fetch_model(spec).path}")


_PULL_TAKES = (
    "`specrun models pull` takes aliases, REPO:QUANT, REPO/FILE.gguf, Hub URLs and GGUF files"
)


def _check_local_gguf(spec: ModelSpec) -> None:
    """A local file given to pull must be a whole GGUF: pull has nothing to fetch for it, and
    saying it is there would pass off any file (/etc/passwd) as a model."""
    if spec.hub is None and spec.local is not None and not spec.local.startswith("demo:"):
        try:
            check_gguf_file(spec.local)
        except GGUFFileError as error:
            raise GGUFFileError(f"{error}; {_PULL_TAKES}") from None


def _print_plan(spec: ModelSpec) -> None:
    if spec.checkpoint is not None:
        _print_conversion(spec)
        return
    if spec.hub is None:
        model = cached_model(spec)
        print(
            f"{spec.text}: {'present at ' + str(model.path) if model else 'local, to be prepared'}"
            "; nothing to download"
        )
        return
    plan = plan_fetch(spec.hub, spec.text, network=not hub_offline())
    print(f"{spec.text}: {plan.repo}")
    for planned in plan.files:
        state = "cached" if planned.cached else "to download"
        print(f"  {planned.name}  {format_size(planned.size)}  {state}")
    if not plan.missing:
        print("  nothing to download")
    elif all(f.size is not None for f in plan.missing):
        print(f"  would download {format_size(sum(f.size or 0 for f in plan.missing))}")
    elif spec.entry and spec.entry.size_gb is not None:
        print(
            f"  would download about {spec.entry.size_gb:.2f} GB "
            "(catalog figure; the Hub was not asked)"
        )


def _print_conversion(spec: ModelSpec) -> None:
    assert spec.checkpoint is not None
    path = spec.checkpoint.gguf_path
    print(f"{spec.text}: {spec.checkpoint.repo}, a Hugging Face checkpoint converted to GGUF")
    try:
        plan = plan_conversion(spec.checkpoint, spec.text, network=not hub_offline())
    except NotCached:  # offline, and not all in the cache: the files are not known
        plan = None
        print(
            f"  its files and those of {spec.checkpoint.target_repo} are not all in the "
            "Hugging Face cache, and the Hub was not asked (HF_HUB_OFFLINE)"
        )
        if spec.entry and spec.entry.size_gb is not None:
            print(f"  would download about {spec.entry.size_gb:.2f} GB (catalog figure)")
    if plan is not None and plan.converted:
        print(f"  converted already: {path}\n  nothing to download")
        return
    if plan is not None:
        for fetch in plan.fetches:
            for planned in fetch.files:
                state = "cached" if planned.cached else "to download"
                print(f"  {fetch.repo}: {planned.name}  {format_size(planned.size)}  {state}")
        _print_total(plan.fetches)
    missing = missing_modules()
    needs = f" (needs {', '.join(missing)}: {CONVERT_EXTRA})" if missing else ""
    print(f"  then converts them with llama.cpp's {CONVERTER_SCRIPT} into {path}{needs}")


def _print_total(plans: tuple[FetchPlan, ...]) -> None:
    missing = [f for plan in plans for f in plan.missing]
    if not missing:
        print("  nothing to download")
    elif all(f.size is not None for f in missing):
        print(f"  would download {format_size(sum(f.size or 0 for f in missing))}")


@app.command()
def verify(
    ctx: typer.Context,
    specs: list[str] = typer.Argument(
        None,
        metavar="[ALIAS...]",
        help="Aliases (or REPO:QUANT, REPO/FILE.gguf); default: every cached download.",
    ),
) -> None:
    """Hash downloaded models again and compare with their pins or the sha256 recorded at download.

    Every file is checked and reported; the exit status is 1 if any was bad or missing."""
    with _reported_errors():
        catalog = _catalog(ctx)
        parsed = (
            [parse_spec(spec, catalog) for spec in specs] if specs else downloaded_models(catalog)
        )
        if not parsed:
            print("no downloaded model in the cache; nothing to verify")
        bad = 0
        for spec in parsed:
            try:
                checked = verify_model(spec)
            except (ModelNotFound, NotCached) as error:  # this one only: go on with the rest
                bad += 1
                report(error)
                continue
            for name, outcome in checked:
                if isinstance(outcome, IntegrityError):
                    bad += 1
                    report(outcome)
                else:
                    print(f"{spec.text}: {name}: sha256 {outcome.sha256} ok ({outcome.source})")
    if bad:
        raise typer.Exit(1)


@app.command()
def show(ctx: typer.Context, model: str = typer.Argument(..., metavar="ALIAS|PATH")) -> None:
    """A model's GGUF metadata and, for a catalog alias, its compatible drafts."""
    with _reported_errors():
        catalog = _catalog(ctx)
        spec = parse_spec(model, catalog)
        resolved = fetch_model(spec, download=False, progress=False)
        info = read_gguf_info(resolved.path)
        vocab = (
            f"{info.vocab_size} tokens, {info.tokenizer_model} ({info.vocab_type})"
            if info.vocab_size
            else "none"
        )
        fields: list[tuple[str, int | str | None]] = [
            ("file", str(info.path)),
            ("architecture", info.architecture),
            ("name", info.name),
            ("layers", info.layers),
            ("context length", info.context_length),
            ("vocabulary", vocab),
            ("file type", info.file_type),
            ("chat template", "yes" if info.has_chat_template else "no"),
            ("tensors", info.tensor_count),
        ]
        if info.split_count:
            fields.append(("split", f"{info.split_count} parts"))
        if spec.entry is not None:
            fields += _catalog_fields(catalog, spec.entry)
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        print(f"{name + ':':<{width + 1}} {format_or_dash(value)}")


def _catalog_fields(catalog: Catalog, entry: CatalogEntry) -> list[tuple[str, str | None]]:
    """What the catalog says of an alias: its source and pairing, for `models show`."""
    source: str | None = entry.repo or entry.local
    if entry.target_repo:
        source = (
            f"{entry.repo} (a Hugging Face checkpoint, converted with the config and tokenizer "
            f"of {entry.target_repo})"
        )
    fields: list[tuple[str, str | None]] = [
        ("catalog family", entry.family),
        ("source", source),
        ("license", entry.license),
        (
            "verified",
            "yes" if entry.verified else "no (file name from public sources, not fetched to check)",
        ),
    ]
    if entry.needs_target:
        use = f"-t {entry.targets[0]} --draft {entry.kind}:{entry.alias}"
        return fields + [
            ("kind", KIND_NOUNS[entry.kind]),
            (
                "head for" if entry.is_head else "block draft for",
                f"{', '.join(entry.targets)} ({use})",
            ),
        ]
    heads, blocks = catalog.heads_for(entry), catalog.blocks_for(entry)
    return fields + [
        ("compatible drafts", ", ".join(catalog.compatible_drafts(entry)) or "none in the catalog"),
        (
            "EAGLE-3 heads",
            f"{', '.join(heads)} (--draft eagle3)" if heads else "none in the catalog",
        ),
        (
            "block drafts",
            f"{', '.join(blocks)} (--draft dflash)" if blocks else "none in the catalog",
        ),
        ("MTP layers", "yes (--draft mtp)" if entry.mtp else "not in the catalog"),
    ]


@app.command("rm")
def remove(ctx: typer.Context, specs: list[str] = typer.Argument(..., metavar="ALIAS...")) -> None:
    """Delete models' files from the Hugging Face cache: their links in the repo's snapshots and
    the blobs no other snapshot links to; nothing outside the repo's folder."""
    with _reported_errors():
        catalog = _catalog(ctx)
        for spec in [parse_spec(text, catalog) for text in specs]:
            print(f"{spec.text}: removed, {format_size(remove_cached(spec))} freed")
