"""Real downloads: huggingface_hub fetches from a Hub on loopback (tests/hubserver.py) into a
temporary cache, through `specrun models pull` and the catalog, and every failure is one line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import huggingface_hub.file_download as file_download
import pytest
from huggingface_hub import constants as hf_constants
from huggingface_hub import try_to_load_from_cache
from typer.testing import CliRunner

from specrun.cli.models import app
from specrun.cli.options import ModelRequest
from specrun.core.loop import Round
from specrun.engine import Engine
from specrun.errors import Interrupted
from specrun.llama.gguf import read_gguf_info
from specrun.models import convert
from specrun.models.catalog import load_catalog, parse_spec, resolve_model
from specrun.models.convert import (
    ConversionError,
    converter_dir,
    download_sdist,
    llama_version,
    missing_modules,
    unpack_converter,
)
from specrun.models.hub import NotCached
from specrun.models.lock import lock_path
from specrun.options import DraftOptions, Eagle3Head
from tests.support.hfcache import (
    HEAD_REPO,
    HEAD_TARGET_REPO,
    LLAMA_1B,
    QWEN_14B,
    QWEN_14B_PARTS,
    fake_checkpoint,
    install_stand_in,
    tiny_eagle3_checkpoint,
    write_target_for_head,
    write_tiny_gguf,
)
from tests.support.hubserver import Fault, HubServer
from tests.support.identity import GREEDY
from tests.support.tinymodels import write_tiny_eagle3_head

Q4_K_M = "Llama-3.2-1B-Instruct-Q4_K_M.gguf"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def llama_1b(hub, tiny_target):
    content = tiny_target.read_bytes()
    hub.add(LLAMA_1B, Q4_K_M, content)
    return content


def one_error_line(result) -> str:
    assert result.exit_code == 1 and result.stdout == "", result.output
    last = result.stderr.splitlines()[-1]
    assert last.startswith("specrun: error: ") and "Traceback" not in result.stderr
    return last


def lock() -> dict:
    return json.loads(lock_path().read_text())["files"]


# --- downloads that work ------------------------------------------------------------------


def test_pull_downloads_a_file_checks_it_and_records_its_sha256(llama_1b, hub, hf_cache):
    result = invoke("pull", "llama-1b-q4")
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.removeprefix("llama-1b-q4: ").strip())
    assert path.is_relative_to(hf_cache) and path.read_bytes() == llama_1b
    assert f"Downloading {LLAMA_1B}: {Q4_K_M} ({len(llama_1b) / 1e3:.2f} kB)" in result.stderr
    assert f"Checking sha256 of {Q4_K_M}" in result.stderr
    sha256 = hashlib.sha256(llama_1b).hexdigest()
    record = lock()[f"{LLAMA_1B}/{Q4_K_M}"]
    assert (record["sha256"], record["source"], record["size"]) == (
        sha256,
        "the Hub's LFS hash",
        len(llama_1b),
    )
    assert [line.split()[0] for line in hub.log] == [
        "GET",
        "HEAD",
        "GET",
    ]  # listing, metadata, bytes

    requests = len(hub.log)
    again = invoke("pull", "llama-1b-q4")
    assert again.exit_code == 0 and again.stdout == result.stdout
    assert (
        len(hub.log) == requests and "Checking" not in again.stderr
    )  # cached, checked already: no work

    shown = invoke("show", "llama-1b-q4")  # a real GGUF came down
    assert shown.exit_code == 0 and re.search(r"^architecture:\s+llama$", shown.stdout, re.M)


def test_a_split_gguf_comes_down_part_by_part(hub, hf_cache, tiny_draft):
    content = tiny_draft.read_bytes()
    thirds = [content[i * len(content) // 3 : (i + 1) * len(content) // 3] for i in range(3)]
    for name, part in zip(QWEN_14B_PARTS, thirds):
        hub.add(QWEN_14B, name, part)
    hub.add(QWEN_14B, "qwen2.5-14b-instruct-q8_0.gguf", b"another quant, not fetched")
    model = resolve_model("qwen-14b-q4", catalog=load_catalog())
    assert [p.name for p in model.parts] == QWEN_14B_PARTS and model.path == model.parts[0]
    assert b"".join(p.read_bytes() for p in model.parts) == content
    assert sorted(k for k in lock() if k.startswith(QWEN_14B)) == [
        f"{QWEN_14B}/{n}" for n in QWEN_14B_PARTS
    ]
    assert not any("q8_0" in line for line in hub.log)


def next_run(size: str) -> str:
    """What the failure line says the next run fetches: huggingface_hub before 1.0 keeps the
    partial file and resumes from it; later releases delete it."""
    return (
        rf"the next run (starts over and fetches all {size} again|"
        rf"resumes from [\d.]+ [kM]B of {size})$"
    )


def test_a_connection_dropped_mid_file_resumes(hub):
    """Within the run from the last whole chunk written (huggingface_hub 1.0 and later), or on the
    next run from the partial file kept (before 1.0): never from the start."""
    chunk = hf_constants.DOWNLOAD_CHUNK_SIZE
    content = os.urandom(2 * chunk + 1000)
    hub.add(LLAMA_1B, Q4_K_M, content)
    hub.faults[f"/{LLAMA_1B}/resolve/"] = Fault(cut_after=chunk + 5000, times=1)
    result = invoke("pull", "llama-1b-q4")
    if result.exit_code:
        assert (
            re.search(next_run("20.97 MB"), result.stderr.splitlines()[-1])
            and "resumes" in result.stderr
        )
        result = invoke("pull", "llama-1b-q4")
    assert result.exit_code == 0, result.output
    assert Path(result.stdout.split(": ", 1)[1].strip()).read_bytes() == content
    resumed_at = int(re.search(r"bytes=(\d+)-$", hub.log[-1])[1])
    assert chunk <= resumed_at <= chunk + 5000


# --- integrity ----------------------------------------------------------------------------


def pinned_catalog(tmp_path: Path, sha256: str) -> Path:
    path = tmp_path / "pinned.toml"
    path.write_text(
        f'[[model]]\nalias = "tiny"\nfamily = "llama3"\nrepo = "{LLAMA_1B}"\nfile = "{Q4_K_M}"\n'
        f'sha256 = "{sha256}"\n'
    )
    return path


def test_a_file_that_is_not_its_pin_is_refused(llama_1b, hub, tmp_path):
    wrong = hashlib.sha256(b"what the pin was made from").hexdigest()
    result = invoke("--catalog", str(pinned_catalog(tmp_path, wrong)), "pull", "tiny")
    line = one_error_line(result)
    assert line == (
        f"specrun: error: {LLAMA_1B}/{Q4_K_M} has sha256 {hashlib.sha256(llama_1b).hexdigest()}, "
        f"not {wrong} (the pin in models.toml); it is not used: remove it with "
        "`specrun models rm tiny` and pull it again"
    )
    right = invoke(
        "--catalog",
        str(pinned_catalog(tmp_path, hashlib.sha256(llama_1b).hexdigest())),
        "pull",
        "tiny",
    )
    assert right.exit_code == 0, right.output
    assert lock()[f"{LLAMA_1B}/{Q4_K_M}"]["source"] == "the pin in models.toml"


def test_a_corrupted_download_is_refused(llama_1b, hub):
    """The Hub's listing and ETag give the file's sha256; the bytes that arrive differ."""
    corrupted = bytearray(llama_1b)
    corrupted[len(corrupted) // 2] ^= 0xFF
    hub.served[f"{LLAMA_1B}/{Q4_K_M}"] = bytes(corrupted)
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert (
        f"has sha256 {hashlib.sha256(corrupted).hexdigest()}, "
        f"not {hashlib.sha256(llama_1b).hexdigest()} "
        "(the Hub's LFS hash); it is not used" in line
    )
    with pytest.raises(Exception, match="it is not used"):  # a later run refuses it as well
        resolve_model("llama-1b-q4", catalog=load_catalog())


def test_verify_hashes_again_and_a_changed_file_is_refused(llama_1b, hub):
    path = Path(invoke("pull", "llama-1b-q4").stdout.split(": ", 1)[1].strip())
    sha256 = hashlib.sha256(llama_1b).hexdigest()
    verified = invoke("verify")
    assert verified.exit_code == 0, verified.output
    assert verified.stdout == f"llama-1b-q4: {Q4_K_M}: sha256 {sha256} ok (the Hub's LFS hash)\n"
    assert f"Checking sha256 of {Q4_K_M}" in verified.stderr  # hashed again, though unchanged

    blob = path.resolve()
    blob.write_bytes(llama_1b[:-1] + b"\0")  # same size, new mtime: rehashed on the next use
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert f"not {sha256} (the Hub's LFS hash, as recorded in {lock_path()})" in line
    assert "not used" in one_error_line(invoke("verify", "llama-1b-q4"))

    removed = invoke(
        "rm", "llama-1b-q4"
    )  # and the lock forgets it, so a new download is trusted afresh
    assert removed.exit_code == 0 and f"{LLAMA_1B}/{Q4_K_M}" not in lock()
    assert invoke("pull", "llama-1b-q4").exit_code == 0


# --- failures, one line each ----------------------------------------------------------------


@pytest.mark.parametrize(
    "status, code, expected",
    [
        (
            401,
            "GatedRepo",
            f"{LLAMA_1B} is gated: accept its terms on http://127.0.0.1:PORT/{LLAMA_1B} "
            "and set HF_TOKEN or run `hf auth login` "
            "(`huggingface-cli login` before huggingface_hub 1.0)",
        ),
        (
            401,
            None,
            f"{LLAMA_1B}: the Hub refused access (HTTP 401 Unauthorized); "
            "set HF_TOKEN or run `hf auth login`",
        ),
        (
            404,
            "RepoNotFound",
            f"no Hugging Face repo {LLAMA_1B}, or it is private and needs a token",
        ),
    ],
)
def test_refusals_of_the_listing(llama_1b, hub, status, code, expected):
    hub.faults[f"/api/models/{LLAMA_1B}/tree/"] = Fault(status=status, error_code=code)
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    port = os.environ["HF_ENDPOINT"].rsplit(":", 1)[1]
    assert line.startswith(f"specrun: error: {expected.replace('PORT', port)}")


def test_a_file_the_repo_lacks(llama_1b, hub):
    line = one_error_line(invoke("pull", f"{LLAMA_1B}/Llama-3.2-1B-Instruct-Q8_0.gguf"))
    assert (
        line == f"specrun: error: {LLAMA_1B} has no file Llama-3.2-1B-Instruct-Q8_0.gguf; "
        f"its GGUF files: {Q4_K_M}"
    )


@pytest.mark.parametrize(
    "status, expected",
    [
        (403, "the Hub refused access (HTTP 403 Forbidden); set HF_TOKEN or run `hf auth login`"),
        (
            400,
            "the Hub answered HTTP 400 Bad Request; "
            "the next run starts over and fetches all 513.70 kB again",
        ),  # nothing partial
    ],
)
def test_refusals_of_the_file(llama_1b, hub, status, expected):
    hub.faults[f"/{LLAMA_1B}/resolve/"] = Fault(status=status)
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert line.startswith(f"specrun: error: {LLAMA_1B}: {Q4_K_M}: {expected}")
    assert not any(
        request.startswith("GET /" + LLAMA_1B) for request in hub.log
    )  # refused at the HEAD


def test_a_connection_lost_for_good_says_the_next_run_starts_over(llama_1b, hub):
    """The file stops at the same byte however often huggingface_hub asks for the rest."""
    hub.faults[f"/{LLAMA_1B}/resolve/"] = Fault(cut_after=len(llama_1b) // 2)
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert line.startswith(
        f"specrun: error: {LLAMA_1B}: {Q4_K_M}: "
        f"the download from {os.environ['HF_ENDPOINT']} failed ("
    )
    assert re.search(next_run(f"{len(llama_1b) / 1e3:.2f} kB"), line)
    with pytest.raises(NotCached):  # whatever partial file huggingface_hub kept is never used
        resolve_model("llama-1b-q4", catalog=load_catalog(), download=False)


def test_ctrl_c_mid_file_says_what_the_next_run_fetches(llama_1b, hub):
    hub.faults[f"/{LLAMA_1B}/resolve/"] = Fault(
        cut_after=len(llama_1b) // 2, then=lambda: os.kill(os.getpid(), signal.SIGINT)
    )
    with pytest.raises(Interrupted) as raised:
        resolve_model("llama-1b-q4", catalog=load_catalog())
    assert str(raised.value).startswith(f"download of {LLAMA_1B}: {Q4_K_M} interrupted; ")
    assert re.search(next_run(f"{len(llama_1b) / 1e3:.2f} kB"), str(raised.value))
    assert raised.value.exit_code == 130


def test_a_failure_of_xet_storage_names_the_switch_to_plain_https(llama_1b, hub):
    xet_available = getattr(
        file_download, "is_xet_available", lambda: False
    )  # what the download asks
    if not xet_available():
        pytest.skip(
            "this huggingface_hub downloads without Xet "
            "(hf_xet not installed, or a release before Xet)"
        )
    hub.xet = True
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert line.startswith(
        f"specrun: error: {LLAMA_1B}: {Q4_K_M}: the download from Xet storage failed ("
    )
    assert "HF_HUB_DISABLE_XET=1 downloads over plain HTTPS instead" in line
    assert any(request.startswith("GET /cas/") for request in hub.log)


def test_an_unreachable_hub_fails_within_seconds(hf_cache, hub, monkeypatch):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", closed)
    started = time.monotonic()
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert time.monotonic() - started < 3
    assert line == (
        f"specrun: error: cannot reach the Hugging Face Hub at {closed} (Connection refused); "
        "models already in the cache work without it (HF_HUB_OFFLINE=1)"
    )


def test_a_download_larger_than_the_free_space_is_refused_before_the_first_byte(
    llama_1b, hub, hf_cache
):
    hub.listed_sizes[f"{LLAMA_1B}/{Q4_K_M}"] = 10**18
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert line.startswith(
        f"specrun: error: {LLAMA_1B} needs 1000000000.00 GB more on disk and {hf_cache} has only"
    )
    assert not any("/resolve/" in request for request in hub.log)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 kB tmpfs: a disk that really fills up. Needs the right to mount (root)."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
            capture_output=True,
            timeout=60,
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here")
    yield folder
    subprocess.run(["umount", str(folder)], check=True, timeout=60)


def test_a_disk_that_fills_up_during_the_download(hub, small_disk, monkeypatch):
    """The file fits when specrun checks; then another writer takes the space."""
    monkeypatch.setenv("HF_HUB_CACHE", str(small_disk / "hub"))
    hub.add(LLAMA_1B, Q4_K_M, os.urandom(200_000))
    hub.faults[f"/{LLAMA_1B}/resolve/"] = Fault(
        times=1, then=lambda: (small_disk / "other").write_bytes(bytes(200_000))
    )
    line = one_error_line(invoke("pull", "llama-1b-q4"))
    assert line.startswith(
        f"specrun: error: {LLAMA_1B}: {Q4_K_M}: the disk is full ({small_disk / 'hub'}); free "
        "some space or set HF_HUB_CACHE to a larger disk; "
    )
    assert re.search(next_run("200.00 kB"), line)


# --- EAGLE-3 heads published as checkpoints: fetched, converted once, recorded ---------------

HEAD = "llama-8b-eagle3"  # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B for llama-8b-q4
TARGET_FILES = [
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]


@pytest.fixture
def checkpoint(hub):
    """The head's checkpoint and its target's repo on the Hub, with files the converter does
    not read beside those it does."""
    head, target = fake_checkpoint()
    for name, content in head.items():
        hub.add(HEAD_REPO, name, content)
    for name, content in target.items():
        hub.add(HEAD_TARGET_REPO, name, content)
    return head, target


@pytest.fixture
def converter(hf_cache, tmp_path, monkeypatch):
    """llama.cpp's converter stood in for where specrun keeps it; returns (install(mode, made),
    the calls it recorded). The stand-in imports nothing of the extra, so its check asks only
    for a module every Python has: the pull runs where torch is not installed (CI)."""
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ("json",))
    record = tmp_path / "converter-calls.json"

    def install(mode: str = "convert", made: Path | None = None) -> Path:
        made = made or write_tiny_eagle3_head(tmp_path / "made.gguf")
        return install_stand_in(
            tmp_path / "specrun", llama_version(), mode=mode, source=made, record=record
        )

    def calls() -> list[dict]:
        return json.loads(record.read_text()) if record.exists() else []

    return install, calls


def converted_path() -> Path:
    return parse_spec(HEAD, load_catalog()).checkpoint.gguf_path


def resolved_files(hub: HubServer) -> list[str]:
    """The files whose bytes were asked for, as REPO/NAME."""
    return sorted(
        m[1] + "/" + m[2]
        for line in hub.log
        if (m := re.match(r"GET /([^/]+/[^/]+)/resolve/main/(\S+)", line))
    )


def test_pull_of_a_checkpoint_head_fetches_what_the_converter_reads_and_converts_once(
    checkpoint, converter, hub, tmp_path
):
    head_files, target_files = checkpoint
    install, calls = converter
    script = install()
    result = invoke("pull", HEAD)
    assert result.exit_code == 0, result.output
    path = converted_path()
    assert path == (
        tmp_path
        / "specrun"
        / "converted"
        / "yuhuili--EAGLE3-LLaMA3.1-Instruct-8B"
        / "for-unsloth--Llama-3.1-8B-Instruct"
        / "EAGLE3-LLaMA3.1-Instruct-8B.gguf"
    )
    assert result.stdout == f"{HEAD}: {path}\n"
    assert path.read_bytes() == (tmp_path / "made.gguf").read_bytes()
    assert f"Converting {HEAD_REPO} to GGUF with llama.cpp's convert_hf_to_gguf.py" in (
        result.stderr
    )
    # The checkpoint and the target's config and tokenizer: not its weights, card or folders.
    assert resolved_files(hub) == sorted(
        [f"{HEAD_REPO}/config.json", f"{HEAD_REPO}/pytorch_model.bin"]
        + [f"{HEAD_TARGET_REPO}/{name}" for name in TARGET_FILES]
    )

    (call,) = calls()
    argv = call["argv"]
    assert argv[:2] == [sys.executable, str(script)]
    assert argv[3] == "--target-model-dir" and argv[5:8] == ["--outtype", "auto", "--outfile"]
    head_dir, target_dir, outfile = Path(argv[2]), Path(argv[4]), Path(argv[8])
    # Folders of links to the cached files, beside the GGUF; the output under a temporary name.
    scratch = head_dir.parent.parent
    assert target_dir.parent.parent == scratch and scratch.parent == path.parent
    assert (head_dir.name, target_dir.name) == (
        "EAGLE3-LLaMA3.1-Instruct-8B",  # the converter names the model after its folder
        "Llama-3.1-8B-Instruct",
    )
    assert call["head"] == {
        name: [True, head_files[name].hex()] for name in ("config.json", "pytorch_model.bin")
    }
    assert call["target"] == {name: [True, target_files[name].hex()] for name in TARGET_FILES}
    assert outfile.parent == path.parent and outfile.name.startswith(f".{path.name}.")
    assert outfile.name.endswith(".partial.gguf") and call["offline"] == ["1", "1"]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # nothing else left

    record = lock()[f"converted/{parse_spec(HEAD, load_catalog()).checkpoint.relative_path}"]
    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record["source"] == (
        f"converted from {HEAD_REPO}@feedfacefeed, {HEAD_TARGET_REPO}@feedfacefeed by "
        f"llama.cpp's convert_hf_to_gguf.py (llama-cpp-python {llama_version()})"
    )
    assert lock()[f"{HEAD_REPO}/pytorch_model.bin"]["source"] == "the Hub's LFS hash"

    requests = len(hub.log)
    again = invoke("pull", HEAD)
    assert again.exit_code == 0 and again.stdout == result.stdout
    assert len(hub.log) == requests and len(calls()) == 1  # no request, no second conversion
    listed = {row["alias"]: row for row in json.loads(invoke("list", "--json").stdout)}
    assert listed[HEAD]["cached"] is True and listed[HEAD]["path"] == str(path)


def test_a_converted_head_is_verified_and_removed_with_its_checkpoint(
    checkpoint, converter, hub, hf_cache
):
    install, _ = converter
    install()
    path = Path(invoke("pull", HEAD).stdout.split(": ", 1)[1].strip())
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    verified = invoke("verify", HEAD)
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.startswith(f"{HEAD}: {path.name}: sha256 {sha256} ok (converted from ")
    assert HEAD in invoke("verify").stdout  # every cached download, the converted head with them

    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))  # changed after its conversion: refused on use and on verify
    assert "it is not used" in one_error_line(invoke("pull", HEAD))
    assert "it is not used" in one_error_line(invoke("verify", HEAD))

    removed = invoke("rm", HEAD)
    assert removed.exit_code == 0, removed.output
    assert not path.exists() and not path.parent.exists()
    assert not any(key.startswith(("converted/", HEAD_REPO)) for key in lock())
    assert try_to_load_from_cache(HEAD_REPO, "pytorch_model.bin", cache_dir=hf_cache) is None
    # The target's files stay: that repo's folder is not the head's to empty.
    assert try_to_load_from_cache(HEAD_TARGET_REPO, "tokenizer.json", cache_dir=hf_cache)
    assert "nothing to remove" in one_error_line(invoke("rm", HEAD))


def test_a_failing_conversion_is_one_line_keeps_its_log_and_no_file(checkpoint, converter, hub):
    install, calls = converter
    install("fail")
    line = one_error_line(invoke("pull", HEAD))
    path = converted_path()
    log = path.with_name(f"{path.name}.convert.log")
    assert line == (
        f"specrun: error: converting {HEAD_REPO} to GGUF failed: ValueError: EAGLE-3 d2t "
        f"contains duplicate target ids; the converter's output is in {log}"
    )
    assert "Loading model" in log.read_text()
    assert sorted(p.name for p in path.parent.iterdir()) == [log.name]
    requests = len(hub.log)
    install()  # a converter that works: the files are cached, only the conversion runs again
    assert invoke("pull", HEAD).exit_code == 0
    assert len(hub.log) == requests and len(calls()) == 2 and not log.exists()


def test_an_output_that_is_not_an_eagle3_head_is_not_kept(checkpoint, converter, tmp_path):
    install, _ = converter
    install(made=tmp_path / "llama.gguf")
    write_tiny_gguf(tmp_path / "llama.gguf")
    line = one_error_line(invoke("pull", HEAD))
    assert line.startswith(
        f"specrun: error: {HEAD_REPO} converted to a llama model, not an EAGLE-3 head"
    )
    assert not converted_path().exists()


def test_ctrl_c_mid_conversion_ends_the_converter_and_leaves_no_file(checkpoint, converter):
    install, calls = converter
    install("interrupt")  # writes half a file, then Ctrl-C reaches specrun
    with pytest.raises(Interrupted) as raised:
        resolve_model(HEAD, catalog=load_catalog())
    assert str(raised.value) == (
        f"conversion of {HEAD} interrupted; nothing was kept, the next run converts again"
    )
    assert raised.value.exit_code == 130
    (call,) = calls()
    assert call["outfile_existed"]  # the temporary file was there, and is gone
    with pytest.raises(ProcessLookupError):  # the converter ended, not left running
        os.kill(call["pid"], 0)
    assert list(converted_path().parent.iterdir()) == []


def test_without_the_convert_extra_the_pull_is_refused_before_any_download(
    checkpoint, converter, hub, monkeypatch
):
    converter[0]()
    monkeypatch.setattr(convert, "CONVERTER_MODULES", ("json", "specrun_no_such_module"))
    line = one_error_line(invoke("pull", HEAD))
    assert line == (
        f"specrun: error: {HEAD} is published as a Hugging Face checkpoint ({HEAD_REPO}) that "
        "specrun converts to GGUF once with llama.cpp's converter, which needs "
        "specrun_no_such_module: pip install 'specrun[convert]'"
    )
    assert hub.log == []


def test_draft_eagle3_converts_the_targets_catalog_head_before_fetching_the_target(
    checkpoint, converter, hub, tiny_target
):
    converter[0]()
    target_file = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    hub.add("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", target_file, tiny_target.read_bytes())
    choice = ModelRequest("llama-8b-q4", "eagle3", None).resolve()
    assert choice.draft == Eagle3Head(converted_path())
    assert choice.target.name == target_file
    order = [line for line in hub.log if "/resolve/" in line and line.startswith("GET")]
    assert HEAD_REPO in order[0] and target_file in order[-1]  # the head first


def test_pip_that_cannot_fetch_the_converter_is_one_line(hf_cache, tmp_path, monkeypatch):
    """A real pip, given nowhere to find llama-cpp-python."""
    empty = tmp_path / "no-packages"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    with pytest.raises(ConversionError) as raised:
        converter_dir(progress=False)
    message = str(raised.value)
    assert message.startswith(
        f"cannot fetch llama.cpp's converter, the source of llama-cpp-python {llama_version()}, "
        "with pip ("
    )
    assert f"llama-cpp-python=={llama_version()}" in message  # pip's own words for it
    assert "the conversion needs it once, with the network on" in message and "\n" not in message
    assert list((tmp_path / "specrun" / "converter").iterdir()) == []  # no scratch left


# --- the real converter on a tiny checkpoint -------------------------------------------------


@pytest.fixture(scope="session")
def llama_converter(tmp_path_factory) -> Path:
    """llama.cpp's converter of the installed llama-cpp-python, fetched once with pip as specrun
    fetches it; the test is skipped without the `convert` extra or where pip cannot get it."""
    if missing_modules():
        pytest.skip(f"needs {', '.join(missing_modules())}: pip install 'specrun[convert]'")
    folder = tmp_path_factory.mktemp("llama-converter")
    try:
        unpack_converter(download_sdist(llama_version(), folder), folder / "converter")
    except ConversionError as error:
        pytest.skip(str(error))
    return folder / "converter"


def test_the_real_converter_makes_a_head_that_drafts_for_its_target(
    hub, hf_cache, tmp_path, llama_converter
):
    """A tiny checkpoint in the EAGLE authors' layout, converted by llama.cpp's own converter
    on `models pull`, then used through `--draft eagle3` with a target of its tokenizer:
    greedy output is the target's own, and the head drafts."""
    shutil.copytree(
        llama_converter, tmp_path / "specrun" / "converter" / f"llama-cpp-python-{llama_version()}"
    )
    head_files, target_files = tiny_eagle3_checkpoint()
    for name, content in head_files.items():
        hub.add("test/EAGLE3-tiny", name, content)
    for name, content in target_files.items():
        hub.add("test/tiny-target", name, content)
    target = tmp_path / "tiny-target.gguf"
    catalog = tmp_path / "models.toml"
    catalog.write_text(
        f'[[model]]\nalias = "tiny"\nfamily = "tiny"\nlocal = "{target}"\nheads = ["tiny-head"]\n'
        '\n[[model]]\nalias = "tiny-head"\nkind = "eagle3"\nfamily = "tiny"\n'
        'repo = "test/EAGLE3-tiny"\nformat = "hf"\ntarget_repo = "test/tiny-target"\n'
        'for = ["tiny"]\n'
    )
    pulled = invoke("--catalog", str(catalog), "pull", "tiny-head")
    assert pulled.exit_code == 0, pulled.output
    head = Path(pulled.stdout.split(": ", 1)[1].strip())
    info = read_gguf_info(head)
    assert (info.architecture, info.layers, info.vocab_size) == ("eagle3", 1, 64)
    assert info.name == "EAGLE3 Tiny"  # from the repo's name, as the converter makes names
    write_target_for_head(target, head)

    choice = ModelRequest("tiny", "eagle3", catalog).resolve()
    assert choice.draft == Eagle3Head(head)
    with (
        Engine.load(choice.target, params=GREEDY) as plain,
        Engine.load(
            choice.target, choice.draft, params=GREEDY, drafting=DraftOptions(gamma="3")
        ) as speculative,
    ):
        prompt = plain.prompt("the cat and the dog", raw=True)
        expected = [
            t for e in plain.stream(prompt, max_tokens=24) if isinstance(e, Round) for t in e.tokens
        ]
        rounds = [e for e in speculative.stream(prompt, max_tokens=24) if isinstance(e, Round)]
    assert [t for r in rounds for t in r.tokens] == expected
    assert sum(r.drafted for r in rounds) > 0
