"""`--draft eagle3:HEAD` and `--draft mtp` as a user runs them: the answer is plain decoding's,
the figures and the server name the draft kind, and a head that does not fit is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_cli import assert_one_line_error
from tests.support.cli import specrun
from tests.support.server import Server, chat
from tests.support.tinymodels import write_tiny_eagle3_head, write_tiny_mtp_model


@pytest.fixture(scope="module")
def head(tiny_dir: Path) -> Path:
    return write_tiny_eagle3_head(tiny_dir / "cli-head.gguf")


@pytest.fixture(scope="module")
def mtp_target(tiny_dir: Path) -> Path:
    return write_tiny_mtp_model(tiny_dir / "cli-mtp.gguf")


def run(target: Path, *options: str) -> list[str]:
    # --threads: with the default, a busy machine (other tests, say) adds a warning on stderr.
    return ["run", "-t", str(target), "--temp", "0", "-n", "24", "--threads", "1", *options]


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_a_head_answers_as_plain_decoding_and_the_figures_name_it(
    tiny_target, head, mtp_target, kind
):
    target, draft = (tiny_target, f"eagle3:{head}") if kind == "eagle3" else (mtp_target, "mtp")
    plain = specrun(*run(target, "--gamma", "0"), "the sea")
    drafted = specrun(*run(target, "-d", draft, "--gamma", "3", "--stats"), "the sea")
    assert drafted.returncode == plain.returncode == 0, drafted.stderr
    assert drafted.stdout == plain.stdout and plain.stdout.strip()
    name = f"eagle3:{head.name}" if kind == "eagle3" else f"mtp:{mtp_target.name}"
    assert f"draft                 {name} ({kind})" in drafted.stderr.splitlines()
    record = json.loads(
        specrun(*run(target, "-d", draft, "--gamma", "3", "--json"), "the sea").stdout
    )
    assert record["draft_kind"] == kind and record["drafted"] > 0
    assert record["draft"] == (f"eagle3:{head}" if kind == "eagle3" else "mtp")


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        ("eagle3:{wrong}", "was made for a target of hidden size 48; target.gguf has 64"),
        ("eagle3:{target}", "target.gguf is not an EAGLE-3 head"),
        ("mtp", "target.gguf has no MTP layers"),
        ("eagle3:{missing}", "no such file"),
    ],
    ids=["another-targets-head", "not-a-head", "no-mtp-layers", "missing-head"],
)
def test_a_draft_that_cannot_serve_the_target_is_one_line(tiny_target, tiny_dir, draft, message):
    wrong = write_tiny_eagle3_head(tiny_dir / "cli-wrong.gguf", target_hidden=48)
    draft = draft.format(wrong=wrong, target=tiny_target, missing=tiny_dir / "nowhere.gguf")
    assert_one_line_error(specrun(*run(tiny_target, "-d", draft), "hi"), message)


@pytest.mark.parametrize("draft", ["eagle3", "eagle3:"])
def test_no_head_named_for_a_target_file_says_how_to_name_one(tiny_target, draft):
    """Without a head, the catalog's head for the target is meant: a file has none."""
    result = specrun(*run(tiny_target, "-d", draft), "hi")
    assert_one_line_error(result, "name the head as eagle3:ALIAS or eagle3:FILE")


def test_the_server_names_the_head_it_drafts_with(mtp_target):
    server = Server("-t", str(mtp_target), "-d", "mtp", "--gamma", "3")
    try:
        answer = chat(server, "the sea", max_tokens=8)
        assert answer.model_extra["specrun"]["drafted"] > 0
        figures = server.stats()
        assert figures["draft"] == {"name": f"mtp:{mtp_target.name}", "kind": "mtp"}
    finally:
        assert server.stop() == 0


def test_several_drafts_make_the_hybrid_and_answer_as_plain_decoding(tiny_target, tiny_draft, head):
    drafts = f"{tiny_draft},eagle3:{head}"
    plain = specrun(*run(tiny_target, "--gamma", "0"), "the cat the cat the cat")
    result = specrun(
        *run(tiny_target, "-d", drafts, "--lookup", "--json"), "the cat the cat the cat"
    )
    record = json.loads(result.stdout)
    assert record["text"] == plain.stdout.rstrip("\n")
    assert record["draft"] == drafts and record["draft_kind"] == "hybrid"


@pytest.mark.parametrize("role", ["-d", "-t"])
def test_a_head_is_not_a_model(tiny_target, head, role):
    options = ["-d", str(head)] if role == "-d" else []
    target = head if role == "-t" else tiny_target
    result = specrun(*run(target, *options), "hi")
    assert_one_line_error(result, f"{head.name} is an EAGLE-3 head")
