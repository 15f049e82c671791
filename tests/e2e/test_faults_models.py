"""Hostile input and faults around models (issue 33), through the real `specrun` in a subprocess.

Specs and cache links that would reach files outside a repo's cache folder, a Hub on loopback
that never answers or answers with something that is not the Hub's, a `models verify` with a
bad file among good ones, empty model names, a cache variable naming a file. Each failure is
one `specrun: error:` line and no traceback; nothing outside the cache is ever touched.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.hfcache import (
    COMMIT,
    LLAMA_1B,
    add_cached_file,
    repo_dir,
)

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


def one_error(result: subprocess.CompletedProcess) -> str:
    """The message of the one `specrun: error:` line, checked to be all there is (exit 1)."""
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert len(lines) == 1 and lines[0].startswith("specrun: error: "), lines
    return lines[0].removeprefix("specrun: error: ")


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
