"""Block drafts (DFlash, DSpark) in the catalog: their entries, their checks, how `--draft dflash`
finds one for a target, and how `models list/show` name them; on a temporary offline cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specrun.cli.models import app
from specrun.cli.options import ModelRequest
from specrun.models.catalog import (
    Catalog,
    CatalogError,
    IncompatibleModels,
    load_catalog,
    parse_spec,
    resolve_block,
    resolve_block_pair,
    resolve_draft,
    resolve_head_pair,
    resolve_model,
    resolve_pair,
    resolve_target,
)
from specrun.models.convert import Checkpoint
from specrun.models.hub import ModelNotFound, NotCached
from specrun.options import PROMPT_LOOKUP, BlockDraftFile
from tests.support.hfcache import add_cached_file, write_tiny_gguf

QWEN3_8B = ("Qwen/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf")  # the catalog's qwen3-8b-q4
LLAMA_8B = ("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf")


def user_catalog(tmp_path: Path, text: str) -> Catalog:
    path = tmp_path / "more.toml"
    path.write_text(text)
    return load_catalog(path)


def converted(alias: str, catalog: Catalog | None = None) -> Path:
    """A block draft as `models pull` leaves it: its GGUF in its place in specrun's cache."""
    checkpoint = parse_spec(alias, catalog or load_catalog()).checkpoint
    assert checkpoint is not None
    write_tiny_gguf(checkpoint.gguf_path, architecture="dflash", layers=1)
    return checkpoint.gguf_path


# --- the built-in entries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "block, target, repo, target_repo",
    [
        ("qwen3-8b-dflash", "qwen3-8b-q4", "z-lab/Qwen3-8B-DFlash-b16", "Qwen/Qwen3-8B"),
        ("qwen3-4b-dflash", "qwen3-4b-q4", "z-lab/Qwen3-4B-DFlash-b16", "Qwen/Qwen3-4B"),
        (
            "llama-8b-dflash",
            "llama-8b-q4",
            "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat",
            "unsloth/Llama-3.1-8B-Instruct",
        ),
        (
            "qwen3-coder-30b-dflash",
            "qwen3-coder-30b-q4",
            "z-lab/Qwen3-Coder-30B-A3B-DFlash",
            "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        ),
        (
            "gpt-oss-20b-dflash",
            "gpt-oss-20b-mxfp4",
            "z-lab/gpt-oss-20b-DFlash",
            "openai/gpt-oss-20b",
        ),
    ],
)
def test_builtin_catalog_pairs_the_published_block_drafts(
    hf_cache, block, target, repo, target_repo
):
    catalog = load_catalog()
    entry, target_entry = catalog.get(block), catalog.get(target)
    assert (entry.kind, entry.format, entry.repo, entry.target_repo) == (
        "dflash",
        "hf",
        repo,
        target_repo,
    )
    assert entry.is_block and entry.needs_target and not entry.is_head
    assert entry.targets == (target,) and entry.family == target_entry.family
    assert target_entry.blocks == (block,) and catalog.blocks_for(target_entry) == [block]
    assert entry.verified is False and target_entry.kind == "model"
    assert block not in catalog.compatible_drafts(target_entry)
    spec = parse_spec(block, catalog)
    assert spec.checkpoint == Checkpoint(repo, target_repo, "dflash")
    assert spec.checkpoint.gguf_path.name == f"{repo.split('/')[1]}.gguf"


def test_the_new_targets_are_gguf_files_of_their_families(hf_cache):
    catalog = load_catalog()
    coder, oss = catalog.get("qwen3-coder-30b-q4"), catalog.get("gpt-oss-20b-mxfp4")
    assert (coder.repo, coder.file, coder.family) == (
        "unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF",
        "Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf",
        "qwen3",
    )
    assert (oss.repo, oss.file, oss.family) == (
        "lmstudio-community/gpt-oss-20b-GGUF",
        "gpt-oss-20b-MXFP4.gguf",
        "gpt-oss",
    )
    # The Coder shares Qwen3's tokenizer, so Qwen3's small models may draft for it too.
    assert "qwen3-0.6b-q4" in catalog.compatible_drafts(coder)
    assert catalog.compatible_drafts(oss) == []


# --- malformed entries: one line each -----------------------------------------------------------

BLOCK = 'alias = "a"\nfamily = "qwen3"\nkind = "dflash"\n'


@pytest.mark.parametrize(
    "body, expected",
    [
        (BLOCK + 'local = "/b.gguf"', "a block draft needs 'for', the aliases of the targets it "),
        (
            BLOCK + 'local = "/b.gguf"\nfor = ["qwen3-8b-q4"]\ndrafts = ["qwen3-0.6b-q4"]',
            "'drafts' belongs to a model",
        ),
        (
            BLOCK + 'local = "/b.gguf"\nfor = ["qwen3-8b-q4"]\nblocks = ["qwen3-8b-dflash"]',
            "'blocks' belongs to a model",
        ),
        (
            'alias = "a"\nfamily = "qwen3"\nlocal = "/m.gguf"\nfor = ["qwen3-8b-q4"]',
            "'for' belongs to an EAGLE-3 head .* or a block draft",
        ),
        (
            BLOCK + 'local = "/b.gguf"\nfor = ["nope"]',
            "a is a block draft for 'nope', which is not in the catalog",
        ),
        (
            BLOCK + 'local = "/b.gguf"\nfor = ["llama-8b-q4"]',
            "a is a block draft for 'llama-8b-q4', which is of family llama3, not qwen3",
        ),
        (
            BLOCK + 'local = "/b.gguf"\nfor = ["qwen3-8b-dflash"]',
            "a is a block draft for 'qwen3-8b-dflash', which is a block draft .*in `blocks`",
        ),
        (
            'alias = "a"\nfamily = "qwen3"\nlocal = "/m.gguf"\nblocks = ["qwen3-0.6b-q4"]',
            "a names block draft 'qwen3-0.6b-q4', which is not a block draft "
            '\\(kind = "dflash"\\)',
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/m.gguf"\nblocks = ["llama-8b-eagle3"]',
            "a names block draft 'llama-8b-eagle3', which is not a block draft",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/m.gguf"\nheads = ["llama-8b-dflash"]',
            "a names head 'llama-8b-dflash', which is not an EAGLE-3 head",
        ),
        (
            'alias = "a"\nfamily = "qwen3"\nlocal = "/m.gguf"\ndrafts = ["qwen3-8b-dflash"]',
            "a recommends draft 'qwen3-8b-dflash', which is a block draft \\(kind = \"dflash\"\\): "
            "a target lists its block drafts in `blocks`",
        ),
        (
            'alias = "a"\nfamily = "x"\nlocal = "/m.gguf"\nblocks = "b"',
            "'blocks' has the wrong type",
        ),
        (
            BLOCK + 'repo = "o/n"\nfor = ["qwen3-8b-q4"]',
            "missing required key 'file' .*or format = \"hf\" for a checkpoint to convert",
        ),
        (
            BLOCK + 'repo = "o/n"\nfor = ["qwen3-8b-q4"]\nformat = "hf"',
            "missing required key 'target_repo'",
        ),
    ],
)
def test_malformed_block_entries_are_one_line(hf_cache, tmp_path, body, expected):
    bad = tmp_path / "bad.toml"
    bad.write_text(f"[[model]]\n{body}\n")
    with pytest.raises(CatalogError, match=expected) as raised:
        load_catalog(bad)
    assert "\n" not in str(raised.value)


# --- which block draft -------------------------------------------------------------------------


def test_draft_dflash_without_a_name_picks_the_targets_catalog_block_draft(hf_cache, tmp_path):
    catalog = load_catalog()
    assert resolve_block("qwen3-8b-q4", "", catalog) == "qwen3-8b-dflash"
    assert resolve_block("qwen3-8b-q4", "/drafts/mine.gguf", catalog) == "/drafts/mine.gguf"
    with pytest.raises(ModelNotFound) as raised:
        resolve_block("qwen3-0.6b-q4", "", catalog)
    assert str(raised.value) == (
        "the catalog has no block draft for qwen3-0.6b-q4; name one as dflash:ALIAS or "
        "dflash:FILE (`specrun models list` shows the block drafts)"
    )
    with pytest.raises(ModelNotFound) as raised:
        resolve_block("/t.gguf", "", catalog)
    assert str(raised.value) == (
        "--draft dflash without a block draft needs a catalog alias as the target, not "
        "'/t.gguf'; name the block draft as dflash:ALIAS or dflash:FILE"
    )
    # A block draft naming a target in `for` serves it, after the target's own `blocks`.
    mine = user_catalog(
        tmp_path,
        '[[model]]\nalias = "my-block"\nkind = "dflash"\nfamily = "qwen3"\nlocal = "/b.gguf"\n'
        'for = ["qwen3-8b-q4", "qwen3-0.6b-q4"]\n',
    )
    assert mine.blocks_for(mine.get("qwen3-8b-q4")) == ["qwen3-8b-dflash", "my-block"]
    assert resolve_block("qwen3-0.6b-q4", "", mine) == "my-block"
    assert mine.heads_for(mine.get("qwen3-8b-q4")) == []  # a block draft is not a head


def test_a_block_draft_for_another_target_is_refused_before_any_download(hf_cache):
    catalog = load_catalog()
    with pytest.raises(IncompatibleModels) as raised:  # offline, empty cache: no NotCached first
        resolve_block_pair("qwen3-4b-q4", "qwen3-8b-dflash", catalog=catalog)
    assert str(raised.value) == (
        "qwen3-8b-dflash is a block draft for qwen3-8b-q4, not for qwen3-4b-q4: a block draft "
        "reads the hidden states of the target it was made for; block drafts for qwen3-4b-q4: "
        "qwen3-4b-dflash"
    )
    with pytest.raises(IncompatibleModels, match="block drafts for qwen3-32b-q4: none in the"):
        resolve_block_pair("qwen3-32b-q4", "qwen3-8b-dflash", catalog=catalog)
    with pytest.raises(ModelNotFound, match="the catalog has no block draft for qwen3-32b-q4"):
        resolve_block_pair("qwen3-32b-q4", "", catalog=catalog)


@pytest.mark.parametrize(
    "resolve, expected",
    [
        (
            lambda c: resolve_block_pair("llama-8b-q4", "llama-1b-q4", catalog=c),
            "llama-1b-q4 is not a block draft but a llama3 model: use it as --draft llama-1b-q4",
        ),
        (
            lambda c: resolve_block_pair("llama-8b-q4", "llama-8b-eagle3", catalog=c),
            "llama-8b-eagle3 is not a block draft but an EAGLE-3 head: use it as "
            "--draft eagle3:llama-8b-eagle3",
        ),
        (
            lambda c: resolve_head_pair("llama-8b-q4", "llama-8b-dflash", catalog=c),
            "llama-8b-dflash is not an EAGLE-3 head but a block draft: use it as "
            "--draft dflash:llama-8b-dflash",
        ),
        (
            lambda c: resolve_pair("llama-8b-q4", "llama-8b-dflash", catalog=c),
            "llama-8b-dflash is a block draft, not a draft model: use --draft "
            "dflash:llama-8b-dflash",
        ),
        (
            lambda c: resolve_target("llama-8b-dflash", catalog=c),
            "llama-8b-dflash is a block draft, not a model to run: use it as "
            "-t llama-8b-q4 --draft dflash:llama-8b-dflash",
        ),
        (
            lambda c: resolve_block_pair("gpt-oss-20b-dflash", "", catalog=c),
            "gpt-oss-20b-dflash is a block draft, not a model to run: use it as "
            "-t gpt-oss-20b-mxfp4 --draft dflash:gpt-oss-20b-dflash",
        ),
    ],
)
def test_block_drafts_heads_and_models_keep_their_roles(hf_cache, resolve, expected):
    with pytest.raises(IncompatibleModels) as raised:
        resolve(load_catalog())
    assert str(raised.value) == expected


def test_draft_auto_points_at_the_block_draft_where_there_is_no_draft(hf_cache):
    with pytest.raises(ModelNotFound) as raised:
        resolve_draft("gpt-oss-20b-mxfp4", "auto", load_catalog())
    assert str(raised.value) == (
        "the catalog recommends no draft for gpt-oss-20b-mxfp4; name a draft model instead "
        "(or use --draft dflash)"
    )


# --- the files ---------------------------------------------------------------------------------


def test_a_converted_block_draft_pairs_with_its_cached_target(hf_cache):
    target = add_cached_file(hf_cache, *QWEN3_8B)
    block = converted("qwen3-8b-dflash")
    for name in ("", "qwen3-8b-dflash", str(block)):
        resolved, resolved_block = resolve_block_pair("qwen3-8b-q4", name, catalog=load_catalog())
        assert (resolved.path, resolved_block.path) == (target, block), name
    # A file given by path is not the catalog's to judge, whichever target: open_block checks it
    # at load (its hidden size, target layers, vocabulary).
    other = hf_cache.parent / "other.gguf"
    write_tiny_gguf(other, architecture="dflash")
    target_4b = add_cached_file(hf_cache, "Qwen/Qwen3-4B-GGUF", "Qwen3-4B-Q4_K_M.gguf")
    resolved, by_path = resolve_block_pair("qwen3-4b-q4", str(other), catalog=load_catalog())
    assert (resolved.path, by_path.path, by_path.entry) == (target_4b, other, None)


def test_a_target_that_lists_a_block_draft_pairs_with_it_from_its_side(hf_cache, tmp_path):
    """A user's own target (another quant) adopts the catalog's block draft with `blocks`."""
    target = add_cached_file(hf_cache, "me/Qwen3-8B-GGUF", "q8.gguf")
    block = converted("qwen3-8b-dflash")
    catalog = user_catalog(
        tmp_path,
        '[[model]]\nalias = "my-8b-q8"\nfamily = "qwen3"\nrepo = "me/Qwen3-8B-GGUF"\n'
        'file = "q8.gguf"\nblocks = ["qwen3-8b-dflash"]\n',
    )
    resolved, resolved_block = resolve_block_pair("my-8b-q8", "", catalog=catalog)
    assert (resolved.path, resolved_block.path) == (target, block)


def test_a_block_draft_not_converted_is_not_cached_and_says_how_to_pull(hf_cache):
    spec = parse_spec("gpt-oss-20b-dflash", load_catalog())
    with pytest.raises(NotCached) as raised:
        resolve_model("gpt-oss-20b-dflash", catalog=load_catalog(), download=False)
    assert str(raised.value) == (
        f"gpt-oss-20b-dflash is not converted yet ({spec.checkpoint.gguf_path}): "
        "run `specrun models pull gpt-oss-20b-dflash`"
    )


# --- models list and show ----------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_list_shows_block_drafts_as_it_shows_heads(hf_cache):
    result = invoke("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    column = lines[0].index("DRAFTING")
    drafting = {line.split()[0]: line[column:] for line in lines[1:]}
    assert drafting["llama-8b-q4"] == "auto, eagle3, dflash"
    assert drafting["qwen3-8b-q4"] == "auto, dflash"
    assert drafting["gpt-oss-20b-mxfp4"] == "dflash"
    assert drafting["qwen3-8b-dflash"] == "block draft for qwen3-8b-q4"
    assert drafting["qwen3-32b-q4"] == "auto"

    rows = {row["alias"]: row for row in json.loads(invoke("list", "--json").stdout)}
    block = rows["qwen3-8b-dflash"]
    assert (block["kind"], block["format"], block["for"], block["target_repo"]) == (
        "dflash",
        "hf",
        ["qwen3-8b-q4"],
        "Qwen/Qwen3-8B",
    )
    assert (block["cached"], block["blocks"], block["heads"]) == (False, [], [])
    assert rows["qwen3-8b-q4"]["blocks"] == ["qwen3-8b-dflash"]
    assert rows["llama-8b-q4"]["heads"] == ["llama-8b-eagle3"]


def shown_fields(stdout: str) -> dict[str, str]:
    return {
        name: value.strip() for name, value in (line.split(":", 1) for line in stdout.splitlines())
    }


def test_show_of_a_block_draft_and_of_its_target(hf_cache):
    block = converted("qwen3-8b-dflash")
    result = invoke("show", "qwen3-8b-dflash")
    assert result.exit_code == 0, result.output
    fields = shown_fields(result.stdout)
    assert (fields["file"], fields["architecture"], fields["kind"]) == (
        str(block),
        "dflash",
        "block draft",
    )
    assert fields["block draft for"] == (
        "qwen3-8b-q4 (-t qwen3-8b-q4 --draft dflash:qwen3-8b-dflash)"
    )
    assert fields["source"] == (
        "z-lab/Qwen3-8B-DFlash-b16 (a Hugging Face checkpoint, converted with the config and "
        "tokenizer of Qwen/Qwen3-8B)"
    )
    assert "compatible drafts" not in fields and "head for" not in fields

    add_cached_file(hf_cache, *QWEN3_8B, write_tiny_gguf(hf_cache.parent / "target.gguf"))
    fields = shown_fields(invoke("show", "qwen3-8b-q4").stdout)
    assert fields["block drafts"] == "qwen3-8b-dflash (--draft dflash)"
    assert fields["EAGLE-3 heads"] == "none in the catalog"
    add_cached_file(hf_cache, *LLAMA_8B, write_tiny_gguf(hf_cache.parent / "llama.gguf"))
    fields = shown_fields(invoke("show", "llama-8b-q4").stdout)
    assert fields["block drafts"] == "llama-8b-dflash (--draft dflash)"
    assert fields["EAGLE-3 heads"] == "llama-8b-eagle3 (--draft eagle3)"


# --- --draft dflash as run, chat, serve and bench resolve it -----------------------------------


def test_run_options_resolve_dflash_and_dspark_through_the_catalog(hf_cache, tmp_path):
    target = add_cached_file(hf_cache, *QWEN3_8B)
    block = converted("qwen3-8b-dflash")
    for draft in ("dflash", "dflash:", "dflash:qwen3-8b-dflash", f"dflash:{block}", "dspark"):
        choice = ModelRequest("qwen3-8b-q4", draft, None).resolve()
        assert (choice.target, choice.draft) == (target, BlockDraftFile(block)), draft
    hybrid = ModelRequest("qwen3-8b-q4", "lookup,dflash", None).resolve()
    assert hybrid.drafts == (PROMPT_LOOKUP, BlockDraftFile(block))
    with pytest.raises(IncompatibleModels, match="not for qwen3-4b-q4"):
        ModelRequest("qwen3-4b-q4", "dflash:qwen3-8b-dflash", None).resolve()
    with pytest.raises(ModelNotFound, match="the catalog has no block draft for qwen3-32b-q4"):
        ModelRequest("qwen3-32b-q4", "dflash", None).resolve()
    with pytest.raises(IncompatibleModels, match="not a block draft but an EAGLE-3 head"):
        ModelRequest("llama-8b-q4", "dspark:llama-8b-eagle3", None).resolve()
    with pytest.raises(ModelNotFound) as raised:
        ModelRequest("qwen3-8b-q4", "dflash:qwen3-8b-dflsh", None).resolve()
    assert str(raised.value) == (
        "no block draft qwen3-8b-dflsh: no such file, nor a catalog alias "
        "(`specrun models list` shows the block drafts)"
    )
    with pytest.raises(ModelNotFound, match=f"no block draft {tmp_path}: it is a directory"):
        ModelRequest("qwen3-8b-q4", f"dflash:{tmp_path}", None).resolve()
