"""State files specrun reads back: a learned state left with NaN is neither used nor kept; the
integrity lock and a models.toml that are not what they should be are one line naming the file
and the field, and one that is not a regular file is never read."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tests.support.cli import one_error, specrun
from tests.support.hfcache import LLAMA_1B, add_cached_file

Q4_K_M = "Llama-3.2-1B-Instruct-Q4_K_M.gguf"


def test_a_learned_state_with_nan_is_replaced_not_kept(tiny_target, tiny_draft, tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path)}
    run = ("run", "-t", str(tiny_target), "-d", str(tiny_draft), "--threads", "1")
    run += ("--temp", "0", "-n", "24", "--json", "the cat")
    first = specrun(*run, env=env)
    assert first.returncode == 0, first.stderr
    (path,) = (tmp_path / "specrun" / "auto").glob("*.json")
    record = json.loads(path.read_text())
    record["state"]["accepted"] = math.nan
    path.write_text(json.dumps(record))  # NaN, as Python's json writes it
    second = specrun(*run, env=env)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["text"] == json.loads(first.stdout)["text"]
    kept = json.loads(path.read_text(), parse_constant=refuse)
    assert math.isfinite(kept["state"]["accepted"]) and kept["state"]["accepted"] > 0


def refuse(name: str) -> object:
    raise AssertionError(f"the state kept {name}")


# --- the integrity lock and a models.toml, read back (issue 49) ---------------------------------

LOCK_FIX = "move it away and run `specrun models verify` to record the cached models again"
DIGEST = "ab" * 32


def record(**changes: object) -> dict[str, object]:
    return {"sha256": DIGEST, "source": "the Hub's LFS hash", "size": 9, "mtime_ns": 1, **changes}


@pytest.mark.parametrize(
    "content, complaint",
    [
        ('{"files": []}', "`files` should be an object"),  # a traceback: 'list' has no .get
        ('{"files": 3}', "`files` should be an object"),
        ("[]", "should be an object"),
        ("{}", "`files` is missing"),
        ('{"files": {"a/b/x.gguf": 5}}', '`files["a/b/x.gguf"]` should be an object'),
        (
            json.dumps({"files": {"a/b/x.gguf": record(sha256="x")}}),
            '`files["a/b/x.gguf"].sha256` should be a sha256: 64 hex digits in lower case',
        ),
        (
            json.dumps({"files": {"a/b/x.gguf": record(size=True)}}),
            '`files["a/b/x.gguf"].size` should be a valid integer',
        ),
        (
            json.dumps({"files": {"a/b/x.gguf": record(size=math.nan)}}),
            '`files["a/b/x.gguf"].size` should be a valid integer',
        ),
        (
            json.dumps({"files": {"a/../x.gguf": record()}}),
            "`files` key 'a/../x.gguf': 'a/..' is not a Hugging Face repo id",
        ),
        ("[" * 100_000, "is not JSON (nested too deeply)"),
        ("not json", "is not JSON (Expecting value: line 1 column 1 (char 0))"),
    ],
    ids=[
        "files-list",
        "files-number",
        "list",
        "no-files",
        "record-number",
        "sha256",
        "bool-size",
        "nan-size",
        "key-climbs",
        "deep",
        "not-json",
    ],
)
def test_a_lock_file_that_is_not_one_is_one_line_naming_the_field(hf_cache, content, complaint):
    """A lock whose `files` was a list or a number ended in a traceback at the first use."""
    add_cached_file(hf_cache, LLAMA_1B, Q4_K_M)
    lock = hf_cache.parent / "hub.specrun-lock.json"
    lock.write_text(content)
    for command in (("models", "verify"), ("models", "pull", f"{LLAMA_1B}/{Q4_K_M}")):
        message = one_error(specrun(*command))
        assert message.startswith(f"the lock file {lock}"), message
        assert complaint in message and message.endswith(LOCK_FIX), message


def test_a_lock_file_that_is_a_fifo_is_not_read(hf_cache):
    add_cached_file(hf_cache, LLAMA_1B, Q4_K_M)
    lock = hf_cache.parent / "hub.specrun-lock.json"
    os.mkfifo(lock)  # a read would wait for a writer for ever
    assert one_error(specrun("models", "verify", "llama-1b-q4", timeout=60)) == (
        f"the lock file {lock} is a FIFO (named pipe), not a regular file"
    )


@pytest.mark.parametrize("kind", ["device", "fifo", "deep"])
def test_a_catalog_that_cannot_be_a_catalog_is_one_line(hf_cache, tmp_path, kind):
    """`--catalog /dev/zero` read until the kernel killed specrun; a TOML array nested a few
    thousand times deep was a RecursionError."""
    path = {"device": Path("/dev/zero"), "fifo": tmp_path / "pipe", "deep": tmp_path / "d.toml"}
    catalog = path[kind]
    if kind == "fifo":
        os.mkfifo(catalog)
    if kind == "deep":
        catalog.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    expected = {
        "device": f"catalog {catalog} is a character device, not a regular file",
        "fifo": f"catalog {catalog} is a FIFO (named pipe), not a regular file",
        "deep": f"{catalog}: invalid TOML: arrays or tables nested too deeply",
    }[kind]
    assert one_error(specrun("models", "--catalog", str(catalog), "list", timeout=60)) == expected
