"""The command line a llama.cpp user brings: llama.cpp's flag names, the colliding `-t` and `-s`,
inline grammars and schemas, `--help` by purpose, default drafting, `serve -m/--alias` and
`specrun ps`. Each as a user runs it: a subprocess."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import httpx
import pytest

from tests.support.cli import one_error, specrun
from tests.support.server import Server

DEFAULT_LINE = re.compile(r"^specrun: drafting with (.+?) \(-d (\S+)\): ")
RUN = ("run", "--temp", "0", "--threads", "1", "--json")


def run_json(*args: str) -> tuple[dict, list[str]]:
    result = specrun(*RUN, *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr.splitlines()


def tiny_catalog(path: Path, target: Path, draft: Path | None) -> Path:
    """A catalog whose `tiny-target` recommends `tiny-draft` (a file on disk) where given."""
    text = (
        f'[[model]]\nalias = "tiny-target"\nfamily = "tiny"\nlocal = "{target}"\n'
        f'drafts = ["tiny-draft"]\n\n[[model]]\nalias = "tiny-draft"\nfamily = "tiny"\n'
        f'local = "{draft or path.parent / "absent.gguf"}"\n'
    )
    path.write_text(text)
    return path


# --- default drafting ------------------------------------------------------------------------


def test_a_target_with_its_catalog_draft_on_disk_drafts_with_it_and_lookup(
    tiny_target, tiny_draft, tmp_path
):
    catalog = str(tiny_catalog(tmp_path / "models.toml", tiny_target, tiny_draft))
    record, stderr = run_json("-t", "tiny-target", "--catalog", catalog, "-n", "16", "the sea")
    assert DEFAULT_LINE.match(stderr[0]).groups() == (
        "tiny-draft and prompt lookup",
        "tiny-draft,lookup",
    )
    assert record["draft"] == f"{tiny_draft},lookup" and record["draft_kind"] == "hybrid"
    # Named by its path, the target is still the catalog's, and its draft still found.
    by_path, stderr = run_json("-t", str(tiny_target), "--catalog", catalog, "-n", "16", "the sea")
    assert by_path["draft"] == record["draft"] and stderr[0].startswith(
        "specrun: drafting with tiny-draft"
    )
    plain, stderr = run_json(
        "-t", "tiny-target", "-d", "none", "--catalog", catalog, "-n", "16", "the sea"
    )
    assert plain["draft"] is None and plain["drafted"] == 0 and stderr == []
    assert record["text"] == plain["text"]  # greedy: the target's own answer


def test_a_target_without_a_draft_at_hand_drafts_by_prompt_lookup_and_says_so(
    tiny_target, tmp_path
):
    catalog = str(tiny_catalog(tmp_path / "models.toml", tiny_target, None))
    record, stderr = run_json("-t", "tiny-target", "--catalog", catalog, "-n", "16", "a b a b a b")
    assert DEFAULT_LINE.match(stderr[0]).groups() == ("prompt lookup", "lookup")
    assert "`specrun models pull tiny-draft` fetches one" in stderr[0]
    assert record["draft"] == "lookup" and record["draft_kind"] == "lookup"
    outside, stderr = run_json("-t", str(tiny_target), "-n", "16", "a b a b a b")
    assert stderr[0].startswith("specrun: drafting with prompt lookup (-d lookup): ")
    assert "is not a catalog model" in stderr[0] and outside["text"] == record["text"]


def test_bench_drafts_with_no_model_where_none_is_at_hand(tiny_target):
    result = specrun(
        "bench", "-t", str(tiny_target), "--gammas", "2", "--modes", "lookup", "-r", "1",
        "-n", "8", "--threads", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("specrun: no draft model: ")
    assert "lookup" in result.stdout


# --- llama.cpp's names -----------------------------------------------------------------------


def test_llama_cpp_names_mean_what_specrun_names_mean(tiny_target, tiny_draft):
    ours, _ = run_json(
        "-t", str(tiny_target), "-d", str(tiny_draft), "-g", "heuristic", "--gamma-max", "2",
        "--p-min", "0.1", "-n", "24", "-c", "256", "--raw", "the sea",
    )  # fmt: skip
    theirs, _ = run_json(
        "-m", str(tiny_target), "-md", str(tiny_draft), "-g", "heuristic", "--draft-max", "2",
        "--draft-p-min", "0.1", "--n-predict", "24", "--ctx-size", "256", "--raw", "the sea",
    )  # fmt: skip
    assert theirs["draft"] == ours["draft"] == str(tiny_draft)
    assert theirs["text"] == ours["text"] and theirs["generated_tokens"] == 24
    assert theirs["gamma_trace"] == ours["gamma_trace"] and max(ours["gamma_trace"]) == 2


def test_the_colliding_short_flags_refuse_llama_cpp_values_in_one_line(tiny_target):
    """-t stays --target and -s --system; a number given to either (llama.cpp's threads,
    its seed) is a usage error that names the flag meant, never a model or a prompt."""
    for args, expected in (
        (("-t", "8"), "-t/--target takes a model, not the number 8: llama.cpp's -t (threads) is "
         "--threads here (--threads 8)"),
        (("-t", str(tiny_target), "-s", "42"), "-s/--system takes a system prompt, not the number "
         "42: llama.cpp's -s (a seed) is --seed here (--seed 42)"),
    ):  # fmt: skip
        result = specrun("run", *args, "hi")
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr.splitlines() == [f"specrun: error: {expected}"]


def test_inline_schema_and_grammar_are_the_files_they_would_be(demo_pair, tmp_path):
    target, draft = map(str, demo_pair)
    schema = '{"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}'
    (tmp_path / "age.json").write_text(schema)
    ask = "How old is a cat? Answer as JSON."
    run = ("-t", target, "-d", draft, "-n", "24", "--threads", "2")
    inline, _ = run_json(*run, "--json-schema", schema, ask)
    from_file, _ = run_json(*run, "-jf", str(tmp_path / "age.json"), ask)
    as_before, _ = run_json(*run, "--json-schema", str(tmp_path / "age.json"), ask)
    assert inline["text"] == from_file["text"] == as_before["text"]
    assert isinstance(json.loads(inline["text"])["age"], int)
    grammar = 'root ::= "yes" | "no"'
    (tmp_path / "yes.gbnf").write_text(grammar)
    answers = {
        run_json(*run, *flags, "Is water wet?")[0]["text"]
        for flags in (("--grammar", grammar), ("--grammar-file", str(tmp_path / "yes.gbnf")))
    }
    assert len(answers) == 1 and answers <= {"yes", "no"}
    both = specrun("run", *run, "--json-schema", schema, "--grammar", grammar, "hi")
    assert "--grammar and --json-schema each constrain the answer" in both.stderr
    missing = specrun("run", *run, "--json-schema", "age.json", "hi")  # no `{`: a file
    assert missing.returncode == 2 and "cannot read JSON schema age.json" in missing.stderr


@pytest.mark.parametrize("command", ["run", "chat", "serve", "bench"])
def test_help_groups_the_options_by_purpose_with_real_metavars(command):
    result = specrun(command, "--help", env={"COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    assert not re.search(r"<(str|int|float|list|path|bool)", result.stdout), result.stdout
    headings = [line[:-1] for line in result.stdout.splitlines() if re.fullmatch(r"\S.*:", line)]
    expected = ["Model", "Drafting", "Sampling", "Prompt and output", "Performance"]
    expected += ["Server"] if command == "serve" else []
    assert [h for h in headings if h in expected] == expected
    if command != "bench":
        assert "--fit on|off" in result.stdout and "--backend-sampling auto|on|off" in result.stdout


# --- serve -m, --alias, -np; specrun ps ----------------------------------------------------


@pytest.fixture(scope="module")
def served(tiny_target: Path):
    running = Server("-m", str(tiny_target), "--alias", "tiny-served", "-np", "1")
    yield running
    running.stop()


def test_serve_takes_llama_server_names_and_drafts_by_default(served, tiny_target):
    assert served.model == "tiny-served"
    # A server's default free source is suffix drafts: its requests repeat earlier answers.
    assert any(line.startswith("specrun: drafting with suffix drafts") for line in served.lines)
    models = httpx.get(f"{served.url}/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["tiny-served"]
    stats = served.stats()
    assert stats["slots"]["total"] == 1 and stats["draft"]["kind"] == "suffix"
    for name in ("tiny-served", tiny_target.stem):  # the file's name answers too
        answer = served.client().completions.create(model=name, prompt="the sea", max_tokens=4)
        assert answer.model == "tiny-served"


def test_ps_shows_what_the_server_has_loaded(served):
    result = specrun("ps", "--url", served.url)
    assert result.returncode == 0, result.stderr
    table = [line.split() for line in result.stdout.splitlines()]
    assert table[0] == ["MODEL", "LOADED", "DEFAULT"] and table[1] == ["tiny-served", "yes", "yes"]
    assert result.stdout.splitlines()[2].startswith("draft ")
    assert "slots 0/1 busy, 0 queued" in result.stdout
    record = json.loads(specrun("ps", "--url", f"{served.url}/v1", "--json").stdout)
    assert record["models"][0]["id"] == "tiny-served" and record["stats"]["slots"]["total"] == 1


def test_ps_without_a_server_is_one_line():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    message = one_error(specrun("ps", "--url", f"http://127.0.0.1:{port}"))
    assert message.startswith(f"no server answers at http://127.0.0.1:{port}/v1/models")
