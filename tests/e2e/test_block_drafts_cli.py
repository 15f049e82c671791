"""`--draft dflash:FILE` and `dspark:FILE` as a user runs them: run, chat, serve and bench
answer as plain decoding does, the figures name the block draft by the kind its file holds,
and a block draft that cannot serve the target is one line before any generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import one_error, specrun
from tests.support.server import Server, chat
from tests.support.tinymodels import write_tiny_block_draft, write_tiny_eagle3_head

PROMPT = "the cat and the dog in the big red road"


@pytest.fixture(scope="module")
def blocks(tiny_dir: Path) -> dict[str, Path]:
    return {
        "dflash": write_tiny_block_draft(tiny_dir / "cli-dflash.gguf"),
        "dspark": write_tiny_block_draft(tiny_dir / "cli-dspark.gguf", dspark=True),
    }


def run(target: Path, *options: str) -> list[str]:
    # --threads: with the default, a busy machine (other tests, say) adds a warning on stderr.
    return ["run", "-t", str(target), "--temp", "0", "-n", "24", "--threads", "1", *options]


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_a_block_draft_answers_as_plain_decoding_and_the_figures_name_it(tiny_target, blocks, kind):
    plain = specrun(*run(tiny_target), PROMPT)
    drafted = specrun(*run(tiny_target, "-d", f"{kind}:{blocks[kind]}", "--gamma", "3"), PROMPT)
    assert drafted.returncode == plain.returncode == 0, drafted.stderr
    assert drafted.stdout == plain.stdout and plain.stdout.strip()
    # Either prefix names a block draft; its kind is the file's, and so is the name shown.
    other = "dspark" if kind == "dflash" else "dflash"
    stats = specrun(
        *run(tiny_target, "-d", f"{other}:{blocks[kind]}", "--gamma", "3", "--stats"), PROMPT
    )
    assert stats.stdout == plain.stdout
    assert f"draft                 {kind}:{blocks[kind].name} ({kind})" in stats.stderr.splitlines()
    record = json.loads(
        specrun(*run(tiny_target, "-d", f"{kind}:{blocks[kind]}", "--json"), PROMPT).stdout
    )
    assert record["draft_kind"] == kind and record["draft"] == f"dflash:{blocks[kind]}"


def test_a_block_draft_beside_prompt_lookup_makes_the_hybrid(tiny_target, blocks):
    drafts = f"lookup,dflash:{blocks['dflash']}"
    plain = specrun(*run(tiny_target), "the cat the cat the cat")
    result = specrun(*run(tiny_target, "-d", drafts, "--json"), "the cat the cat the cat")
    record = json.loads(result.stdout)
    assert record["text"] == plain.stdout.rstrip("\n")
    assert record["draft"] == drafts and record["draft_kind"] == "hybrid"


def test_a_piped_chat_with_a_block_draft_answers_as_plain_decoding(tiny_target, blocks):
    options = ["-t", str(tiny_target), "--temp", "0", "-n", "16", "--threads", "1"]
    turns = "the sea\nand the cat\n"
    plain = specrun("chat", *options, stdin=turns)
    drafted = specrun("chat", *options, "-d", f"dspark:{blocks['dspark']}", stdin=turns)
    assert drafted.returncode == plain.returncode == 0, drafted.stderr
    assert drafted.stdout == plain.stdout and plain.stdout.strip()


def test_bench_runs_a_block_draft_as_its_modes(tiny_target, blocks, tmp_path):
    out = tmp_path / "bench.json"
    result = specrun(
        "bench",
        "-t",
        str(tiny_target),
        "-d",
        f"dflash:{blocks['dspark']}",
        *("--repeat", "1", "--max-tokens", "8", "--gammas", "2", "--threads", "1"),
        *("--modes", "γ=2,auto", "--json", str(out)),
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["draft"] == f"dspark:{blocks['dspark'].name}"
    assert {(row["mode"], row["draft"]) for row in record["table"]} == {
        ("plain", "-"),
        ("γ=2", "dspark"),
        ("auto", "dspark"),
    }
    assert sum(run["stats"]["drafted"] for run in record["runs"] if run["mode"] == "γ=2") > 0
    assert record["identical"] is True


def test_the_server_names_the_block_draft_it_drafts_with(tiny_target, blocks):
    server = Server("-t", str(tiny_target), "-d", f"dspark:{blocks['dspark']}", "--gamma", "3")
    try:
        answer = chat(server, PROMPT, max_tokens=8)
        assert answer.model_extra["specrun"]["drafted"] > 0
        name = f"dspark:{blocks['dspark'].name}"
        assert server.stats()["draft"] == {"name": name, "kind": "dspark"}
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"n_embd": 48}, "was made for a target of hidden size 48; target.gguf has 64"),
        ({"target_layers": (0, 5)}, "reads target layers [0, 5]; target.gguf has 2 (0 to 1)"),
        ({"variant": "x"}, "does not match target target.gguf: token"),
        (
            {"made_for": ("other-model", "llama", 2)},
            "was made for other-model (llama, 2 layers); target.gguf is target",
        ),
        ({"mask": False}, "names no mask token: it is not a usable block draft"),
    ],
    ids=["hidden-size", "layers", "vocabulary", "recorded-target", "no-mask"],
)
def test_a_block_draft_made_for_another_target_is_one_line(tiny_target, tiny_dir, knobs, message):
    wrong = write_tiny_block_draft(tiny_dir / f"cli-wrong-{'-'.join(knobs)}.gguf", **knobs)
    assert message in one_error(specrun(*run(tiny_target, "-d", f"dflash:{wrong}"), "hi"))


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        (
            "dflash:{target}",
            "target.gguf is not a DFlash or DSpark draft (its architecture is llama)",
        ),
        ("dspark:{head}", "head.gguf is not a DFlash or DSpark draft (its architecture is eagle3)"),
        ("dflash:{missing}", "no block draft {missing}: no such file"),
        ("dflash:{folder}", "no block draft {folder}: it is a directory"),
    ],
    ids=["a-model", "an-eagle3-head", "missing", "a-folder"],
)
def test_a_file_that_is_no_block_draft_is_one_line(tiny_target, tiny_dir, draft, message):
    names = {
        "target": tiny_target,
        "head": write_tiny_eagle3_head(tiny_dir / "cli-block-head.gguf"),
        "missing": tiny_dir / "nowhere.gguf",
        "folder": tiny_dir,
    }
    result = specrun(*run(tiny_target, "-d", draft.format(**names)), "hi")
    assert message.format(**names) in one_error(result)


def test_the_same_block_draft_twice_is_a_usage_error(tiny_target, blocks):
    """dflash: and dspark: name the same file."""
    twice = f"dflash:{blocks['dflash']},dspark:{blocks['dflash']}"
    result = specrun(*run(tiny_target, "-d", twice), "hi")
    assert result.returncode == 2 and result.stdout == ""
    name = blocks["dflash"].name
    assert result.stderr.splitlines() == [f"specrun: error: --draft names dflash:{name} twice"]


@pytest.mark.parametrize("role", ["-t", "-d"])
def test_a_block_draft_run_as_a_model_says_how_to_use_it(tiny_target, blocks, role):
    """A block draft's graph needs its target's hidden states: as a target or a draft model it
    is refused in one line naming the --draft form, not llama.cpp's own assertion."""
    block = blocks["dflash"]
    args = ("-t", str(block)) if role == "-t" else ("-t", str(tiny_target), "-d", str(block))
    result = specrun("run", *args, "--threads", "1", "hi")
    assert one_error(result) == (
        f"{block.name} is a DFlash or DSpark block draft: it drafts for the target "
        f"it was made for (as the draft dflash:{block.name}) and cannot run as a model"
    )
