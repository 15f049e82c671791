"""`specrun models list/pull/show/rm` through Typer's test runner, on a temporary offline cache."""

from __future__ import annotations

import json

import pytest
from gguf import GGUFReader
from huggingface_hub import try_to_load_from_cache
from typer.testing import CliRunner

from specrun.cli.models import app
from specrun.llama.gguf import GGUFFileError, check_gguf_file
from specrun.models import convert
from specrun.models.catalog import load_catalog, parse_spec
from tests.support.hfcache import (
    HEAD_REPO,
    HEAD_TARGET_REPO,
    LLAMA_1B,
    QWEN_14B,
    QWEN_14B_PARTS,
    add_cached_file,
    write_tiny_gguf,
)

Q4_K_M = "Llama-3.2-1B-Instruct-Q4_K_M.gguf"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def shown_fields(stdout: str) -> dict[str, str]:
    """`name: value` lines of `models show` as a dict."""
    return {
        name: value.strip() for name, value in (line.split(":", 1) for line in stdout.splitlines())
    }


@pytest.fixture
def llama_1b(hf_cache, tmp_path):
    """llama-1b-q4 in the cache as a tiny but real GGUF."""
    content = write_tiny_gguf(
        tmp_path / "source.gguf", context=512, tokens=("<s>", "</s>", "x", "y", "z")
    )
    return add_cached_file(hf_cache, LLAMA_1B, Q4_K_M, content)


def test_list_is_an_aligned_table_with_cached_state(llama_1b):
    result = invoke("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ALIAS", "FAMILY", "PARAMS", "QUANT", "SIZE", "CACHED", "DRAFTING"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["llama-1b-q4"].split() == [
        "llama-1b-q4",
        "llama3",
        "1B",
        "Q4_K_M",
        "0.81",
        "GB",
        "yes",
        "-",
    ]
    cached = lines[0].index("CACHED")
    assert rows["llama-70b-q4"][cached] == "-"
    column = lines[0].index("FAMILY")
    assert all(
        line[column - 2 : column] == "  " and line[column] != " " for line in lines
    )  # aligned


def test_list_shows_how_each_target_drafts_and_what_each_head_serves(hf_cache):
    result = invoke("list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    column = lines[0].index("DRAFTING")
    drafting = {line.split()[0]: line[column:] for line in lines[1:]}
    assert drafting["llama-8b-q4"] == "auto, eagle3, dflash"
    assert drafting["llama-70b-q4"] == "auto, eagle3"
    assert drafting["qwen-7b-q4"] == "auto" and drafting["qwen-0.5b-q4"] == "-"
    assert drafting["glm-4.5-air-q4"] == "mtp"
    assert drafting["llama-8b-eagle3"] == "EAGLE-3 head for llama-8b-q4"
    assert drafting["llama-70b-eagle3"] == "EAGLE-3 head for llama-70b-q4"


def test_list_json(llama_1b):
    result = invoke("list", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["alias"]: row for row in json.loads(result.stdout)}
    assert rows["llama-1b-q4"]["cached"] is True and rows["llama-1b-q4"]["path"] == str(llama_1b)
    assert (
        rows["llama-70b-q4"]["cached"] is False
        and rows["llama-70b-q4"]["drafts"][0] == "llama-1b-q4"
    )
    assert rows["demo-target"]["local"] == "demo:target"
    head = rows["llama-8b-eagle3"]
    assert (head["kind"], head["format"], head["for"], head["target_repo"], head["cached"]) == (
        "eagle3",
        "hf",
        ["llama-8b-q4"],
        "unsloth/Llama-3.1-8B-Instruct",
        False,
    )
    assert (
        rows["llama-8b-q4"]["heads"] == ["llama-8b-eagle3"] and rows["llama-8b-q4"]["mtp"] is False
    )
    assert rows["glm-4.5-air-q4"]["mtp"] is True and rows["glm-4.5-air-q4"]["kind"] == "model"


def test_catalog_option_adds_aliases(hf_cache, tmp_path):
    extra = tmp_path / "extra.toml"
    extra.write_text(
        '[[model]]\nalias = "mine"\nfamily = "llama3"\nrepo = "me/x-GGUF"\n'
        'file = "x.gguf"\nparams = "9B"\n'
    )
    result = invoke("--catalog", str(extra), "list")
    assert result.exit_code == 0, result.output
    assert any(line.split()[:3] == ["mine", "llama3", "9B"] for line in result.stdout.splitlines())


def test_catalog_syntax_error_is_one_line_with_file_and_line(hf_cache, tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text('[[model]]\nalias = "a"\nfamily = "x\n')
    result = invoke("--catalog", str(broken), "list")
    assert result.exit_code == 1
    assert (
        result.stderr.startswith(f"specrun: error: {broken}: line 3")
        and result.stderr.count("\n") == 1
    )


def test_pull_dry_run_shows_files_and_sizes_and_fetches_nothing(hf_cache):
    for name in QWEN_14B_PARTS[:2]:
        add_cached_file(hf_cache, QWEN_14B, name, b"0123456789")
    result = invoke("pull", "--dry-run", "qwen-14b-q4", "llama-70b-q4")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"qwen-14b-q4: {QWEN_14B}" in out
    assert (
        f"{QWEN_14B_PARTS[0]}  10 B  cached" in out
        and f"{QWEN_14B_PARTS[2]}  size unknown  to download" in out
    )
    assert "llama-70b-q4: bartowski/Llama-3.3-70B-Instruct-GGUF" in out
    assert "would download about 42.52 GB (catalog figure" in out
    assert try_to_load_from_cache(QWEN_14B, QWEN_14B_PARTS[2], cache_dir=hf_cache) is None


def test_pull_dry_run_of_a_checkpoint_head(hf_cache, monkeypatch):
    path = parse_spec("llama-8b-eagle3", load_catalog()).checkpoint.gguf_path
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ("json", "specrun_no_such_module"))
    result = invoke("pull", "--dry-run", "llama-8b-eagle3")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "llama-8b-eagle3: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, a Hugging Face checkpoint "
        "converted to GGUF",
        "  its files and those of unsloth/Llama-3.1-8B-Instruct are not all in the Hugging Face "
        "cache, and the Hub was not asked (HF_HUB_OFFLINE)",
        "  would download about 0.85 GB (catalog figure)",
        f"  then converts them with llama.cpp's convert_hf_to_gguf.py into {path} "
        "(needs specrun_no_such_module: pip install 'specrun[convert]')",
    ]
    # With the files cached, they are listed; converted, there is nothing to do.
    add_cached_file(hf_cache, HEAD_REPO, "config.json", b"{}")
    add_cached_file(hf_cache, HEAD_REPO, "pytorch_model.bin", b"0123456789")
    add_cached_file(hf_cache, HEAD_TARGET_REPO, "config.json", b'{"a": 1}')
    add_cached_file(hf_cache, HEAD_TARGET_REPO, "tokenizer.json", b"{...}")
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ("json",))
    lines = invoke("pull", "--dry-run", "llama-8b-eagle3").stdout.splitlines()
    assert lines[1:] == [
        f"  {HEAD_REPO}: config.json  2 B  cached",
        f"  {HEAD_REPO}: pytorch_model.bin  10 B  cached",
        f"  {HEAD_TARGET_REPO}: config.json  8 B  cached",
        f"  {HEAD_TARGET_REPO}: tokenizer.json  5 B  cached",
        "  nothing to download",
        f"  then converts them with llama.cpp's convert_hf_to_gguf.py into {path}",
    ]
    write_tiny_gguf(path, architecture="eagle3")
    lines = invoke("pull", "--dry-run", "llama-8b-eagle3").stdout.splitlines()
    assert lines[1:] == [f"  converted already: {path}", "  nothing to download"]


def test_pull_of_a_checkpoint_head_without_the_extra_says_what_to_install(hf_cache, monkeypatch):
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ("json", "specrun_no_such_module"))
    result = invoke("pull", "llama-8b-eagle3")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.rstrip().endswith(
        "needs specrun_no_such_module: pip install 'specrun[convert]'"
    )


def test_pull_of_a_cached_model_needs_no_network(llama_1b):
    result = invoke("pull", "llama-1b-q4")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"llama-1b-q4: {llama_1b}\n"


def test_pull_offline_fails_with_one_clear_line(hf_cache):
    result = invoke("pull", "llama-1b-q4")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"specrun: error: {LLAMA_1B}: {Q4_K_M} is not in the Hugging Face cache"
    )
    assert "HF_HUB_OFFLINE" in result.stderr and result.stderr.count("\n") == 1


def test_pull_checks_every_name_before_fetching(llama_1b):
    result = invoke("pull", "llama-1b-q4", "lama-8b-q4")
    assert result.exit_code == 1 and result.stdout == ""
    assert "unknown model 'lama-8b-q4': did you mean llama-8b-q4" in result.stderr


def test_show_alias_prints_gguf_metadata_and_compatible_drafts(llama_1b):
    result = invoke("show", "llama-1b-q4")
    assert result.exit_code == 0, result.output
    fields = shown_fields(result.stdout)
    assert fields["file"] == str(llama_1b)
    assert (
        fields["architecture"] == "llama"
        and fields["layers"] == "2"
        and fields["context length"] == "512"
    )
    assert fields["vocabulary"] == "5 tokens, gpt2 (BPE)"
    assert fields["file type"] == "F16" and fields["chat template"] == "yes"
    assert fields["catalog family"] == "llama3"
    assert fields["compatible drafts"] == "llama-70b-q4, llama-8b-q4, llama-3b-q4, llama-1b-q4_0"


def test_show_target_lists_its_recommended_drafts(hf_cache, tmp_path):
    content = write_tiny_gguf(tmp_path / "source.gguf", chat_template=None)
    add_cached_file(
        hf_cache,
        "bartowski/Llama-3.3-70B-Instruct-GGUF",
        "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
        content,
    )
    result = invoke("show", "llama-70b-q4")
    assert result.exit_code == 0, result.output
    fields = shown_fields(result.stdout)
    assert fields["chat template"] == "no"
    assert fields["compatible drafts"] == "llama-1b-q4, llama-1b-q4_0, llama-3b-q4"


def test_show_of_a_head_and_of_the_targets_it_serves(hf_cache, tmp_path):
    head = parse_spec("llama-8b-eagle3", load_catalog()).checkpoint.gguf_path
    write_tiny_gguf(head, architecture="eagle3", layers=1)
    result = invoke("show", "llama-8b-eagle3")
    assert result.exit_code == 0, result.output
    fields = shown_fields(result.stdout)
    assert (fields["file"], fields["architecture"], fields["kind"]) == (
        str(head),
        "eagle3",
        "EAGLE-3 head",
    )
    assert fields["head for"] == "llama-8b-q4 (-t llama-8b-q4 --draft eagle3:llama-8b-eagle3)"
    assert fields["source"] == (
        f"{HEAD_REPO} (a Hugging Face checkpoint, converted with the config and tokenizer of "
        f"{HEAD_TARGET_REPO})"
    )
    assert "compatible drafts" not in fields

    content = write_tiny_gguf(tmp_path / "target.gguf")
    add_cached_file(
        hf_cache,
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
        "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        content,
    )
    fields = shown_fields(invoke("show", "llama-8b-q4").stdout)
    assert fields["EAGLE-3 heads"] == "llama-8b-eagle3 (--draft eagle3)"
    assert fields["MTP layers"] == "not in the catalog"
    assert fields["compatible drafts"] == "llama-1b-q4, llama-1b-q4_0"

    glm = "unsloth/GLM-4.5-Air-GGUF"
    add_cached_file(hf_cache, glm, "Q4_K_M/GLM-4.5-Air-Q4_K_M-00001-of-00002.gguf", content)
    add_cached_file(hf_cache, glm, "Q4_K_M/GLM-4.5-Air-Q4_K_M-00002-of-00002.gguf", b"part 2")
    fields = shown_fields(invoke("show", "glm-4.5-air-q4").stdout)
    assert fields["MTP layers"] == "yes (--draft mtp)"
    assert fields["EAGLE-3 heads"] == "none in the catalog"


def test_show_path(hf_cache, tmp_path):
    path = tmp_path / "model.gguf"
    write_tiny_gguf(path, architecture="qwen2", layers=3)
    result = invoke("show", str(path))
    assert result.exit_code == 0, result.output
    fields = shown_fields(result.stdout)
    assert (fields["file"], fields["architecture"], fields["layers"]) == (str(path), "qwen2", "3")
    assert "compatible drafts" not in fields


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"PK\x03\x04 a zip, not a model", "is not a GGUF file"),
        (None, "is truncated: its tensor data needs"),
    ],
)
def test_show_rejects_a_bad_file(hf_cache, tmp_path, content, expected):
    path = tmp_path / "bad.gguf"
    if content is None:  # a real GGUF cut short, as by an interrupted copy
        content = write_tiny_gguf(tmp_path / "whole.gguf")[:-40]
    path.write_bytes(content)
    result = invoke("show", str(path))
    assert (
        result.exit_code == 1
        and expected in result.stderr
        and result.stderr.startswith("specrun: error: ")
    )


def test_show_of_a_model_not_downloaded(hf_cache):
    result = invoke("show", "gemma-27b-q4")
    assert (
        result.exit_code == 1
        and "ggml-org/gemma-3-27b-it-GGUF: gemma-3-27b-it-Q4_K_M.gguf" in result.stderr
    )


def test_rm_deletes_the_alias_files_and_keeps_the_rest(hf_cache):
    links = [add_cached_file(hf_cache, QWEN_14B, name, name.encode()) for name in QWEN_14B_PARTS]
    other = add_cached_file(hf_cache, QWEN_14B, "qwen2.5-14b-instruct-q8_0.gguf", b"q8")
    result = invoke("rm", "qwen-14b-q4")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"qwen-14b-q4: removed, {sum(len(n) for n in QWEN_14B_PARTS)} B freed\n"
    assert not any(link.exists() for link in links) and other.read_bytes() == b"q8"
    again = invoke("rm", "qwen-14b-q4")
    assert again.exit_code == 1 and "nothing to remove" in again.stderr


def test_rm_refuses_local_models(hf_cache):
    result = invoke("rm", "demo-target")
    assert result.exit_code == 1 and "is a local file" in result.stderr


# --- check_gguf_file, the cheap check the runtime can run before loading --------------------------


def test_check_gguf_file_agrees_with_gguf_reader_on_where_the_data_ends(tmp_path):
    path = tmp_path / "m.gguf"
    whole = write_tiny_gguf(path, tokens=tuple(f"t{i}" for i in range(300)))
    reader = GGUFReader(path)
    assert max(t.data_offset + t.n_bytes for t in reader.tensors) == len(whole)
    check_gguf_file(path)  # whole: no error
    path.write_bytes(whole[:-1])
    with pytest.raises(
        GGUFFileError, match=f"needs {len(whole)} bytes, the file has {len(whole) - 1}"
    ):
        check_gguf_file(path)


@pytest.mark.parametrize("cut, expected", [(200, "its header ends early"), (2, "not a GGUF file")])
def test_check_gguf_file_rejects_a_cut_header(tmp_path, cut, expected):
    path = tmp_path / "m.gguf"
    path.write_bytes(write_tiny_gguf(path)[:cut])
    with pytest.raises(GGUFFileError, match=expected):
        check_gguf_file(path)


def test_check_gguf_file_on_a_missing_file(tmp_path):
    with pytest.raises(GGUFFileError, match="no such file"):
        check_gguf_file(tmp_path / "absent.gguf")
