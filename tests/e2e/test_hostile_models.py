"""Integrity of models and the cache (issue 49), through the real `specrun` in a subprocess:
`models verify` finds every download specrun made, `models pull` takes no file that is not a
GGUF, Hub URLs are read as repo, revision and file, and `doctor` diagnoses a broken cache.

Downloads come from a Hub on loopback (tests/support/hubserver.py) into a temporary cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from specrun.models.demo import demo_pair_paths
from tests.support.cli import one_error, specrun
from tests.support.hfcache import COMMIT, add_cached_file, repo_dir, write_tiny_gguf
from tests.support.hubserver import COMMIT as HUB_COMMIT
from tests.support.hubserver import HubServer

REPO = "someone/tiny-GGUF"  # in no catalog: reached only as REPO/FILE or by its URL
FILE = "tiny-Q8_0.gguf"
CONTENT = b"GGUF tiny bytes"
SHA256 = hashlib.sha256(CONTENT).hexdigest()
PULL_TAKES = (
    "`specrun models pull` takes aliases, REPO:QUANT, REPO/FILE.gguf, Hub URLs and GGUF files"
)


@pytest.fixture
def hub(hf_cache):
    server = HubServer()
    server.add(REPO, FILE, CONTENT)
    url = server.start()
    yield server, {"HF_ENDPOINT": url, "HF_HUB_OFFLINE": "0", "HF_HUB_DOWNLOAD_TIMEOUT": "5"}
    server.stop()


# --- verify finds every download ----------------------------------------------------------------


def test_verify_without_names_finds_repo_file_downloads_and_their_damage(hub, hf_cache):
    """A download by REPO/FILE was not looked at: `nothing to verify`, exit 0, with a damaged
    file in the cache. It is found from the lock, as is a file of another revision."""
    server, env = hub
    url = f"https://huggingface.co/{REPO}/resolve/v2/{FILE}"
    for spec in (f"{REPO}/{FILE}", url):
        pulled = specrun("models", "pull", spec, env=env)
        assert pulled.returncode == 0, pulled.stderr
    by_url = f"hf.co/{REPO}/resolve/v2/{FILE}"  # how verify names the file of a revision
    verified = specrun("models", "verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines() == [
        f"{REPO}/{FILE}: {FILE}: sha256 {SHA256} ok (the Hub's LFS hash)",
        f"{by_url}: {FILE}: sha256 {SHA256} ok (the Hub's LFS hash)",
    ]

    (repo_dir(hf_cache, REPO) / "blobs" / SHA256).write_bytes(b"GGUF changed on disk")
    damaged = specrun("models", "verify")
    assert damaged.returncode == 1 and damaged.stdout == "", damaged.stderr
    errors = [line for line in damaged.stderr.splitlines() if line.startswith("specrun: error:")]
    changed = hashlib.sha256(b"GGUF changed on disk").hexdigest()
    assert errors == [
        f"specrun: error: {REPO}/{FILE} has sha256 {changed}, not {SHA256} (the Hub's LFS "
        f"hash, as recorded in {hf_cache.parent / 'hub.specrun-lock.json'}); it is not used: "
        f"remove it with `specrun models rm {REPO}/{FILE}` and pull it again",
        f"specrun: error: {REPO}@v2/{FILE} has sha256 {changed}, not {SHA256} (the Hub's LFS "
        f"hash, as recorded in {hf_cache.parent / 'hub.specrun-lock.json'}); it is not used: "
        f"remove it with `specrun models rm {by_url}` and pull it again",
    ]


# --- pull takes GGUF files only -----------------------------------------------------------------


def test_pull_refuses_a_local_file_that_is_not_a_gguf(hf_cache, tmp_path):
    """`models pull /etc/passwd` printed the path and exited 0, as if it were a model."""
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert one_error(specrun("models", "pull", str(text))) == (
        f"{text} is not a GGUF file (it does not start with 'GGUF'); {PULL_TAKES}"
    )
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(write_tiny_gguf(cut)[:100])
    message = one_error(specrun("models", "pull", str(cut)))
    assert message.startswith(f"{cut} is truncated: ") and message.endswith(PULL_TAKES)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_pull_refuses_what_is_not_a_regular_file_without_reading_it(hf_cache, tmp_path, kind):
    path = {"fifo": tmp_path / "pipe", "device": Path("/dev/zero"), "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # a read would block for ever
    words = {"fifo": "a FIFO (named pipe)", "device": "a character device", "folder": "a directory"}
    assert one_error(specrun("models", "pull", str(path), timeout=60)) == (
        f"{path} is {words[kind]}, not a GGUF file"
    )


def test_pull_of_a_whole_local_gguf_still_names_it(hf_cache, tmp_path):
    model = tmp_path / "model.gguf"
    write_tiny_gguf(model)
    pulled = specrun("models", "pull", str(model))
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout == f"{model}: {model}\n"


# --- Hub URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, revision, file",
    [
        (f"https://huggingface.co/{REPO}/resolve/main/{FILE}", "main", FILE),
        (f"https://huggingface.co/{REPO}/blob/main/{FILE}", "main", FILE),  # the file's page
        (f"https://huggingface.co/{REPO}/resolve/main/{FILE}?download=true", "main", FILE),
        (f"hf.co/{REPO}/resolve/v2/{FILE}", "v2", FILE),
        (f"https://www.huggingface.co/{REPO}/blob/{HUB_COMMIT}/{FILE}", HUB_COMMIT, FILE),
        # percent-encoded, as a browser may copy it
        (f"https://huggingface.co/{REPO}/resolve/main/{FILE.replace('-', '%2D')}", "main", FILE),
    ],
    ids=["resolve", "blob", "query", "hf.co-revision", "commit", "quoted"],
)
def test_a_hub_url_is_read_as_repo_revision_and_file(hub, hf_cache, url, revision, file):
    """Such a URL was read as the file `resolve/main/x.gguf` of the repo, and not found."""
    server, env = hub
    pulled = specrun("models", "pull", url, env=env)
    assert pulled.returncode == 0, pulled.stderr
    snapshot = repo_dir(hf_cache, REPO) / "snapshots" / HUB_COMMIT
    assert pulled.stdout == f"{url}: {snapshot / file}\n"
    assert f"GET /{REPO}/resolve/{revision}/{file}" in server.log
    assert any(line.startswith(f"GET /api/models/{REPO}/tree/{revision}") for line in server.log)
    # Found in the cache afterwards at that revision, with no network.
    again = specrun("models", "pull", "--dry-run", url)
    assert again.returncode == 0, again.stderr
    assert f"  {file}  {len(CONTENT)} B  cached\n" in again.stdout


@pytest.mark.parametrize(
    "url, expected",
    [
        (
            f"https://huggingface.co/{REPO}/resolve/../{FILE}",
            "'..' is not a revision specrun takes",
        ),
        (f"https://huggingface.co/{REPO}/resolve/main/../{FILE}", f"'../{FILE}' is not a file"),
        (
            f"https://huggingface.co/datasets/{REPO}/resolve/main/{FILE}",
            "is in a dataset or a Space, not in a model repo",
        ),
    ],
    ids=["revision", "file", "dataset"],
)
def test_a_hub_url_that_leaves_the_repo_is_refused(hub, url, expected):
    server, env = hub
    assert expected in one_error(specrun("models", "pull", url, env=env))
    assert not any("/resolve/" in line for line in server.log)


def test_a_damaged_ref_in_the_cache_leads_nowhere_outside_it(hf_cache, tmp_path):
    """refs/main is read to find the snapshot: one naming `../..` found files anywhere."""
    elsewhere = tmp_path / "elsewhere"
    write_tiny_gguf(elsewhere / FILE)
    add_cached_file(hf_cache, REPO, "README.md")
    ref = repo_dir(hf_cache, REPO) / "refs" / "main"
    ref.write_text(os.path.relpath(elsewhere, ref.parent.parent / "snapshots"))
    message = one_error(specrun("models", "show", f"{REPO}/{FILE}"))
    assert message.startswith(f"{REPO}: {FILE} is not in the Hugging Face cache")
    ref.write_text(COMMIT)  # whole again: the repo is found as before
    assert "README.md" in os.listdir(repo_dir(hf_cache, REPO) / "snapshots" / COMMIT)


# --- doctor diagnoses a broken cache ------------------------------------------------------------


def test_doctor_names_a_truncated_demo_model_and_the_fix(hf_cache, tmp_path):
    """It crashed with a struct.error traceback on the file it should have diagnosed."""
    env = {"SPECRUN_CACHE": str(tmp_path / "specrun")}
    os.environ.update(env)  # for demo_pair_paths() here: hf_cache's monkeypatch restores it
    target, draft = demo_pair_paths()
    write_tiny_gguf(draft)
    target.write_bytes(write_tiny_gguf(target)[:200])
    report = specrun("doctor", env=env)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert (
        f"  - the demo pair's target is broken: {target} is truncated: its header ends early "
        "(an interrupted download or copy?)\n"
        f"    fix: delete it (`rm {target}`) and make it again: "
        "`specrun models pull demo-target`\n"
    ) in report.stdout
    record = json.loads(specrun("doctor", "--json", env=env).stdout)
    assert [broken["path"] for broken in record["broken_files"]] == [str(target)]
    assert record["demo_placement"] == {}  # not estimated from a broken file


def test_doctor_names_a_lock_file_and_a_catalog_that_cannot_be_read(hf_cache, tmp_path):
    """Every other command stops at either; doctor says which file and how to fix it."""
    lock = hf_cache.parent / "hub.specrun-lock.json"
    lock.write_text('{"files": []}')
    catalog = tmp_path / "config" / "specrun" / "models.toml"
    catalog.parent.mkdir(parents=True)
    catalog.write_text("[[model]]\nalias = 3\n")
    report = specrun("doctor", "--json")
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    broken = {b["path"]: b for b in json.loads(report.stdout)["broken_files"]}
    assert broken[str(lock)]["why"].startswith(
        f"the lock file {lock}: `files` should be an object; move it away"
    )
    assert broken[str(catalog)]["why"] == f"{catalog}: [[model]] #1: 'alias' has the wrong type"
    assert f"{catalog}: [[model]] #1: 'alias' has the wrong type" in specrun("doctor").stdout
