"""`specrun bench` on tiny models: every mode runs, the figures hang together, outputs agree.
(Speeds are reported by the benchmark, never asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from specrun.bench import (
    Episode,
    default_modes,
    load_episodes,
    load_prompts,
    plot,
    render_text,
    run_bench,
)
from specrun.core.drafting import ModelDraft
from specrun.core.heads import HeadDraft
from specrun.core.sampling import SamplingParams
from specrun.errors import SpecrunError
from specrun.llama.heads import open_eagle3
from specrun.llama.model import Model
from specrun.system.busy import Contention
from specrun.system.cpus import usable_cpus
from tests.support.tinymodels import write_tiny_eagle3_head

PROMPTS = [
    {"class": "a", "prompt": "the cat and the dog"},
    {"class": "b", "prompt": "hello world and the sea"},
]


@pytest.fixture(scope="module")
def result(tiny_target, tiny_draft):
    with Model(tiny_target, n_ctx=512) as target, Model(tiny_draft, n_ctx=512) as draft:
        modes = default_modes([1, 3], has_draft=True, lookup=True)
        return run_bench(
            target,
            ModelDraft(draft, target.n_vocab),
            PROMPTS,
            modes,
            params=SamplingParams(temperature=0),
            max_tokens=24,
            repeat=2,
            gamma_max=4,
        )


def test_every_mode_and_class_is_in_the_table(result):
    names = ["plain", "γ=1", "γ=3", "heuristic", "auto", "lookup", "suffix", "hybrid"]
    assert result.modes == names
    assert [(r["class"], r["mode"]) for r in result.table] == [
        (c, m) for c in ("a", "b", "all") for m in names
    ]
    assert len(result.runs) == 2 * len(PROMPTS) * len(names)
    # Each row says which draft its mode ran, as --stats names the kind.
    assert {r["mode"]: r["draft"] for r in result.table} == {
        "plain": "-",
        "γ=1": "model",
        "γ=3": "model",
        "heuristic": "model",
        "auto": "model",
        "lookup": "lookup",
        "suffix": "suffix",
        "hybrid": "lookup+model",
    }


def test_figures_hang_together(result):
    for row in result.table:
        assert row["tokens_per_second"] > 0
        if row["mode"] == "plain":
            assert (
                row["speedup"] == 1.0 and row["mean_gamma"] == 0 and row["acceptance_rate"] is None
            )
        if row["mode"] == "γ=3":
            assert row["mean_gamma"] <= 3 and row["mean_accepted_length"] > 1
        # Every mode decodes plainly now and then, so each has an estimate to set beside its ratio.
        assert row["estimated_speedup"] > 0
    assert set(result.costs.verify_by_width) == set(range(1, 6))
    assert result.costs.draft_per_token > 0
    assert 0 < result.alpha <= 1 and result.predicted_gamma in range(0, 5)


def test_greedy_outputs_are_identical_across_modes(result):
    assert result.identical is True and result.mismatches == []
    text = render_text(result)
    assert (
        "outputs: identical across all modes" in text and "cost curve" in text and " est. " in text
    )


def test_the_table_says_which_draft_ran_and_how_busy_the_machine_was(result):
    text = render_text(result).splitlines()
    assert text[2].split()[:3] == ["class", "mode", "draft"]
    assert [line.split()[:3] for line in text if line.startswith("a ")][-3:] == [
        ["a", "lookup", "lookup"],
        ["a", "suffix", "suffix"],
        ["a", "hybrid", "lookup+model"],
    ]
    # Other programs' CPU use while it ran, where the bench lasted long enough to tell (this
    # one, on tiny models, may not have: under a second).
    if result.contention is not None:
        assert result.contention.cpus == len(usable_cpus()) and result.contention.others >= 0
    for contention, shown in (
        (None, "- (not measured here)"),
        (
            Contention(others=0.4, cpus=2, threads=2),
            "0.4 of 2 CPUs busy on average, beside 2 threads",
        ),
    ):
        text = render_text(replace(result, contention=contention)).splitlines()
        assert f"  other programs   {shown}" in text


def test_json_holds_every_run_without_token_lists(result):
    record = json.loads(result.to_json())
    assert len(record["runs"]) == len(result.runs)
    assert "tokens" not in record["runs"][0] and "tokens_per_second" in record["runs"][0]["stats"]


def test_plot_draws_a_png(result, tmp_path):
    path = tmp_path / "bench.png"
    plot(result, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_one_token_a_generation_has_no_loop_overhead_to_report(tiny_target):
    """The prompt's pass chooses the only token, so no plain run decodes: the overhead is
    unmeasured, not a crash (statistics.median of Nones was one)."""
    with Model(tiny_target, n_ctx=512) as target:
        one = run_bench(
            target,
            None,
            PROMPTS[:1],
            default_modes([], has_draft=False, lookup=True),
            params=SamplingParams(temperature=0),
            max_tokens=1,
            repeat=2,
            gamma_max=2,
        )
    assert one.costs.overhead is None and "loop overhead    - ms" in render_text(one)


def test_prompt_files(tmp_path):
    good = tmp_path / "p.jsonl"
    good.write_text('{"prompt": "x", "class": "c"}\n\n{"prompt": "y"}\n')
    assert load_prompts(good) == [
        {"class": "c", "prompt": "x"},
        {"class": "prompts", "prompt": "y"},
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\nnot json\n')
    with pytest.raises(SpecrunError, match="bad.jsonl:2"):
        load_prompts(bad)
    with pytest.raises(SpecrunError, match="cannot read prompts"):
        load_prompts(tmp_path / "missing.jsonl")


def test_bench_command_prints_the_table_and_writes_json(tiny_target, tiny_draft, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "the sea", "class": "sea"}\n')
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specrun",
            "bench",
            "-t",
            str(tiny_target),
            "-d",
            str(tiny_draft),
            "--prompts",
            str(prompts),
            "-r",
            "1",
            "-n",
            "8",
            "--gammas",
            "2",
            "--modes",
            "γ=2,auto,lookup",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "sea" in result.stdout and "auto" in result.stdout and "heuristic" not in result.stdout
    assert "of the best fixed" in result.stdout
    assert json.loads(out.read_text())["modes"] == ["plain", "γ=2", "auto", "lookup"]


def test_bench_command_runs_episodes_and_trees(tiny_target, tmp_path):
    episodes = tmp_path / "episodes.jsonl"
    lines = [
        {"name": "e", "kind": "edit", "history": True, "system": "s", "turns": ["a b", "b c"]},
        {"name": "r", "kind": "records", "history": False, "system": "s", "turns": ["x", "y"]},
    ]
    episodes.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "bench.json"
    args = ["bench", "-t", str(tiny_target), "-d", "none", "--episodes", str(episodes)]
    args += ["-r", "1", "-n", "12", "--tree", "2", "--threads", "1", "--json", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "specrun", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "bench: 2 episodes (4 requests)" in result.stderr
    record = json.loads(out.read_text())
    assert record["modes"] == ["plain", "lookup", "suffix", "lookup tree", "suffix tree"]
    assert record["classes"] == ["edit", "records"] and record["identical"] is True
    both = subprocess.run(
        [sys.executable, "-m", "specrun", *args, "--prompts", str(episodes)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert both.returncode == 2 and "give one" in both.stderr


def test_a_head_takes_the_draft_models_place(tiny_target, tiny_dir):
    """`bench -d eagle3:HEAD`: the draft's modes (fixed γ, heuristic, auto, hybrid) run the head,
    its outputs equal plain decoding's and its cost per drafted token is measured."""
    head_file = write_tiny_eagle3_head(tiny_dir / "bench-head.gguf")
    with Model(tiny_target, n_ctx=512) as target:
        head, rows = open_eagle3(head_file, target)
        try:
            result = run_bench(
                target,
                HeadDraft(head, rows, target.n_vocab),
                PROMPTS,
                default_modes([2], has_draft=True, lookup=True),
                params=SamplingParams(temperature=0),
                max_tokens=16,
                repeat=1,
                gamma_max=4,
            )
        finally:
            head.close()
    assert result.draft == "eagle3:bench-head.gguf" and result.identical
    assert {r["mode"]: r["draft"] for r in result.table}["γ=2"] == "eagle3"
    assert result.costs.draft_per_token > 0
    assert sum(r.stats["drafted"] for r in result.runs if r.mode == "γ=2") > 0


EPISODES = [
    Episode("records", "extraction", False, "the cat", ("the dog and", "the dog and the", "a red")),
    Episode("edits", "edit", True, "the sea", ("hello world", "and the sea", "the cat")),
]


@pytest.fixture(scope="module")
def agentic(tiny_target):
    # Fixed γ: what a request drafts depends on the text and the store alone, not on a policy
    # that learned from the repetitions before.
    with Model(tiny_target, n_ctx=1024, tree_branches=4) as target:
        modes = [replace(m, gamma="4") for m in default_modes([], False, lookup=True, trees=True)]
        modes[0] = replace(modes[0], gamma="0")
        return run_bench(
            target,
            None,
            [],
            modes,
            params=SamplingParams(temperature=0),
            max_tokens=40,
            repeat=2,
            gamma_max=6,
            episodes=EPISODES,
        )


def test_episodes_run_every_request_in_every_mode_and_agree(agentic):
    names = ["plain", "lookup", "suffix", "lookup tree", "suffix tree"]
    assert agentic.modes == names and agentic.classes == ["extraction", "edit"]
    assert len(agentic.runs) == 2 * 6 * len(names)
    assert agentic.identical, agentic.mismatches  # trees and chains alike: plain's tokens
    assert {r["mode"]: r["draft"] for r in agentic.table} == {
        "plain": "-",
        "lookup": "lookup",
        "suffix": "suffix",
        "lookup tree": "lookup",
        "suffix tree": "suffix",
    }


def test_suffix_drafts_learn_within_a_repetition_and_start_over(agentic):
    """A request sent alone drafts from the answers to earlier ones: the later requests of
    the extraction episode draft more under suffix drafts than under lookup, and each
    repetition's first request drafts as the first repetition's did (the store starts over)."""

    def drafted(mode: str, index: int, repetition: int) -> int:
        run = next(
            r
            for r in agentic.runs
            if (r.mode, r.prompt_index, r.repetition) == (mode, index, repetition)
        )
        return run.stats["drafted"]

    later = [(i, k) for i in (1, 2) for k in (0, 1)]
    assert sum(drafted("suffix", i, k) for i, k in later) > sum(
        drafted("lookup", i, k) for i, k in later
    )
    assert drafted("suffix", 0, 0) == drafted("suffix", 0, 1)


def test_the_built_in_episodes_parse():
    episodes = load_episodes()
    assert {e.kind for e in episodes} == {"extraction", "edit", "tools", "template"}
