"""`specrun run` as a user runs it: a subprocess, stdout for the answer, one-line errors."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from specrun.llama.model import Model
from tests.support.cli import long_generation, specrun
from tests.support.processes import finish, within


def assert_one_line_error(result: subprocess.CompletedProcess, pattern: str, code: int = 1) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specrun: error: "), result.stderr
    assert pattern in lines[0], lines[0]
    assert result.stdout == ""


def test_run_streams_only_the_answer_and_matches_plain_decoding(tiny_target, tiny_draft):
    # --threads: with the default, a busy machine (other tests, say) adds a warning on stderr.
    common = ["run", "-t", str(tiny_target), "--temp", "0", "-n", "24", "--threads", "1", "the sea"]
    speculative = specrun(*common, "-d", str(tiny_draft), "--gamma", "3")
    plain = specrun(*common, "--gamma", "0")
    assert speculative.returncode == plain.returncode == 0, speculative.stderr
    assert speculative.stdout == plain.stdout and speculative.stdout.strip()
    assert speculative.stderr == ""


def test_stats_and_json_report_the_figures(tiny_target, tiny_draft):
    run = ("run", "-t", str(tiny_target), "-d", str(tiny_draft), "--temp", "0", "-n", "20")
    run += ("--gamma", "4", "--raw")
    result = specrun(*run, "--stats", "the sea")
    assert result.returncode == 0
    for label in (
        "prompt",
        "generated",
        "drafted",
        "accepted",
        "acceptance",
        "mean accepted length",
        "rounds",
    ):
        assert any(line.startswith(label) for line in result.stderr.splitlines()), label
    record = json.loads(specrun(*run, "--json", "the sea").stdout)
    assert record["generated_tokens"] == 20 and record["drafted"] > 0
    assert record["text"] == result.stdout.rstrip("\n")
    assert 0 <= record["acceptance_rate"] <= 1 and record["mean_accepted_length"] >= 1


def test_backend_sampling_on_gives_the_same_answer_and_says_so(tiny_target, tiny_draft):
    """--backend-sampling on: this CPU build's backend chooses the candidates (slower here,
    so auto leaves it off); the answer is the one whole rows give, sampled from a seed."""
    run = ("run", "-t", str(tiny_target), "-d", str(tiny_draft), "--seed", "4", "-n", "24")
    run += ("--gamma", "3", "--threads", "1", "--raw", "--json")
    whole = json.loads(specrun(*run, "the sea").stdout)
    chosen = json.loads(specrun(*run, "--backend-sampling", "on", "the sea").stdout)
    assert chosen["text"] == whole["text"] and chosen["accepted"] > 0
    assert chosen["backend_sampling"] is True
    assert "backend_sampling" not in whole


def test_run_keeps_to_a_json_schema_or_a_grammar(demo_pair, tmp_path):
    target, draft = map(str, demo_pair)
    schema = tmp_path / "cat.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"],
            }
        )
    )
    ask = "Describe a cat as JSON, with its name and age."
    run = ("run", "-t", target, "-d", draft, "--temp", "0", "-n", "64", "--threads", "2")
    answer = specrun(*run, "--json-schema", str(schema), ask)
    assert answer.returncode == 0, answer.stderr
    record = json.loads(answer.stdout)
    assert isinstance(record["name"], str) and isinstance(record["age"], int)
    grammar = tmp_path / "yes.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    assert specrun(*run, "--grammar", str(grammar), "Is water wet?").stdout.strip() in ("yes", "no")
    both = specrun(*run, "--grammar", str(grammar), "--json-schema", str(schema), "hi")
    assert_one_line_error(both, "--grammar and --json-schema", code=2)
    (tmp_path / "bad.json").write_text("{not json")
    bad = specrun(*run, "--json-schema", str(tmp_path / "bad.json"), "hi")
    assert_one_line_error(bad, "is not JSON", code=2)
    (tmp_path / "odd.json").write_text('{"type": "object", "properties": 5}')
    odd = specrun(*run, "--json-schema", str(tmp_path / "odd.json"), "hi")
    assert_one_line_error(odd, "the JSON schema's `properties` should be an object", code=2)
    (tmp_path / "bad.gbnf").write_text("root ::= (")
    assert_one_line_error(
        specrun(*run, "--grammar", str(tmp_path / "bad.gbnf"), "hi"), "the grammar does not parse"
    )


def test_prompt_comes_from_stdin_then_the_argument(tiny_target):
    result = specrun(
        "run", "-t", str(tiny_target), "--raw", "-n", "1", "--json", "summarise", stdin="the cat\n"
    )
    with Model(tiny_target, n_ctx=64) as model:
        expected = model.tokenize("the cat\n\nsummarise")
    assert json.loads(result.stdout)["prompt_tokens"] == len(expected)


def test_chat_template_is_applied_unless_raw(tiny_target):
    templated = json.loads(specrun("run", "-t", str(tiny_target), "-n", "1", "--json", "hi").stdout)
    raw = json.loads(
        specrun("run", "-t", str(tiny_target), "-n", "1", "--json", "--raw", "hi").stdout
    )
    assert templated["prompt_tokens"] > raw["prompt_tokens"]


def test_a_raw_prompt_is_the_exact_prompt_special_tokens_included(tiny_target):
    """As in llama.cpp: the user's own template in raw text gives its special tokens."""
    own_template = "<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n"
    raw = specrun("run", "-t", str(tiny_target), "-n", "1", "--json", "--raw", own_template)
    with Model(tiny_target, n_ctx=64) as model:
        expected = model.tokenize(own_template, parse_special=True)
        as_text = model.tokenize(own_template, parse_special=False)
        specials = [t for t in expected if model.is_special(t)]
    assert len(specials) == 4 and len(as_text) > len(expected)  # BOS and the three markers
    assert json.loads(raw.stdout)["prompt_tokens"] == len(expected)
    # The same prompt, rendered by the model's template from one user message, is the same.
    templated = specrun("run", "-t", str(tiny_target), "-n", "1", "--json", "the cat")
    assert json.loads(templated.stdout)["prompt_tokens"] == len(expected)


@pytest.mark.parametrize("case", ["missing", "not-gguf", "truncated"])
def test_bad_model_files(tmp_path, tiny_target, case):
    path = tmp_path / "model.gguf"
    if case == "not-gguf":
        path.write_text("hello")
    elif case == "truncated":
        path.write_bytes(tiny_target.read_bytes()[:30_000])
    expected = {
        "missing": "no such file",
        "not-gguf": "is not a GGUF file",
        "truncated": "truncated, corrupt or unsupported",
    }[case]
    assert_one_line_error(specrun("run", "-t", str(path), "hi"), expected)


def test_incompatible_draft_says_what_differs(tiny_target, tiny_foreign):
    result = specrun("run", "-t", str(tiny_target), "-d", str(tiny_foreign), "hi")
    assert_one_line_error(result, "does not match target")
    assert "'▁the' vs '▁thex'" in result.stderr


def test_prompt_longer_than_the_context(tiny_target):
    # --threads: with the default, a busy machine adds a warning before the error; -d none:
    # without it, the line that says which draft stands for none comes first.
    run = ("run", "-t", str(tiny_target), "-d", "none", "--ctx", "256", "--threads", "1")
    assert_one_line_error(
        specrun(*run, "--raw", "the " * 400), "must be shorter than the context (256)"
    )


@pytest.mark.parametrize(
    "option",
    [
        ["--temp", "-1"],
        ["--top-p", "2"],
        ["--gamma", "lots"],
        ["--bogus"],
        ["--backend-sampling", "gpu"],
    ],
)
def test_invalid_option_values(tiny_target, option):
    assert_one_line_error(specrun("run", "-t", str(tiny_target), *option, "hi"), "", code=2)


def test_closed_pipe_ends_quietly(demo_pair):
    process = long_generation(demo_pair[0])
    within(process, lambda: process.stdout.read(5), "the answer")
    process.stdout.close()  # like `| head -c 5`
    _, stderr, code = finish(process)
    assert code == 0
    assert "Traceback" not in stderr.decode() and "Error" not in stderr.decode()


def test_ctrl_c_prints_what_was_generated_and_exits_130(demo_pair):
    process = long_generation(demo_pair[0])
    first = within(process, lambda: process.stdout.read(4), "the answer")  # under way
    process.send_signal(signal.SIGINT)
    rest, stderr, code = finish(process)
    assert code == 130
    assert len(first + rest) > 4
    assert b"interrupted" in stderr and b"Traceback" not in stderr
