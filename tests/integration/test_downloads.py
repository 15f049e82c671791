"""Real downloads: huggingface_hub fetches from a Hub on loopback (tests/hubserver.py) into a
temporary cache, through `specrun models pull` and the catalog, and every failure is one line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import huggingface_hub.file_download as file_download
import huggingface_hub.utils as hub_utils
import pytest
from huggingface_hub import constants as hf_constants
from typer.testing import CliRunner

from specrun.cli.models import app
from specrun.errors import Interrupted
from specrun.models.catalog import load_catalog, resolve_model
from specrun.models.hub import NotCached
from specrun.models.lock import lock_path
from tests.support.hfcache import LLAMA_1B, QWEN_14B, QWEN_14B_PARTS
from tests.support.hubserver import Fault, HubServer

Q4_K_M = "Llama-3.2-1B-Instruct-Q4_K_M.gguf"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def hub(hf_cache, monkeypatch):
    """A Hub on loopback that huggingface_hub may reach: offline mode off for this test only."""
    server = HubServer()
    monkeypatch.setenv("HF_ENDPOINT", server.start())
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # read once, at import
    if hasattr(hub_utils, "reset_sessions"):  # releases before 1.0 keep a session made offline
        hub_utils.reset_sessions()
    yield server
    server.stop()


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
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


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
