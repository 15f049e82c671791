"""`specrun heads train` as a user runs it: a head written and usable at once, a summary on
stdout, bad options and a stop in one line each, and a stopped run going on from its
checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_cli import assert_one_line_error
from tests.support.cli import specrun
from tests.support.processes import default_signals

pytest.importorskip("torch")

# Where bench/native_compare.sh builds the native tools from the vendored llama.cpp.
NATIVE = Path(os.environ.get("SPECRUN_NATIVE_BIN", "/tmp/specrun-native/build/bin"))


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    lines = [
        {"prompt": "the cat and the dog", "template": "raw"},
        {"prompt": "hello world", "template": "chat"},
        {"prompt": "the sun and the moon", "template": "raw"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def train(target: Path, out: Path, prompts: Path, *options: str) -> list[str]:
    return [
        "heads",
        "train",
        str(target),
        "--out",
        str(out),
        "--prompts",
        str(prompts),
        "--answer-tokens",
        "16",
        "--threads",
        "1",
        *options,
    ]


def test_a_trained_head_is_written_and_drafts_here_and_in_native_llama_cpp(
    tmp_path, tiny_target, prompts
):
    out = tmp_path / "head.gguf"
    done = specrun(*train(tiny_target, out, prompts, "--steps", "20"))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    assert "held-out acceptance per drafted position" in done.stdout
    assert "(untrained: " in done.stdout
    used = specrun(
        "run", "-t", str(tiny_target), "-d", f"eagle3:{out}", "--gamma", "3", "--temp", "0",
        "-n", "16", "--threads", "1", "--json", "the cat and the dog",
    )  # fmt: skip
    assert used.returncode == 0, used.stderr
    result = json.loads(used.stdout)
    assert result["draft_kind"] == "eagle3" and result["drafted"] > 0
    native = NATIVE / "llama-speculative-simple"
    if not native.is_file():
        return  # the native peer is checked where bench/native_compare.sh built it
    log = subprocess.run(
        [str(native), "-m", str(tiny_target), "-md", str(out), "--spec-type", "draft-eagle3",
         "-p", "the cat and the dog", "-n", "16", "--temp", "0", "-t", "1",
         "--spec-draft-n-max", "3", "--spec-draft-n-min", "3"],
        capture_output=True, text=True, errors="replace", timeout=120,
    )  # fmt: skip
    assert log.returncode == 0, log.stderr[-2000:]
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", log.stdout + log.stderr)
    assert drafted and int(drafted.group(1)) > 0


@pytest.mark.parametrize(
    "options, words, code",
    [
        (["--layers", "1,2"], "--layers takes three layer numbers", 2),
        (["--device", "tpu"], "--device is auto, cpu, cuda or mps", 2),
        (["--layers", "0,1,9"], "has layers 0 to 1", 1),
        (["--draft-vocab", "100000", "--steps", "1"], "the draft vocabulary is 1 to", 1),
    ],
)
def test_bad_options_are_one_line(tmp_path, tiny_target, prompts, options, words, code):
    result = specrun(*train(tiny_target, tmp_path / "h.gguf", prompts, *options))
    assert result.returncode == code, result.stderr
    # The status line that names the run may come first; the error is one line, the last.
    errors = [line for line in result.stderr.splitlines() if line.startswith("specrun: error:")]
    assert errors == result.stderr.splitlines()[-1:] and words in errors[0], result.stderr
    assert not (tmp_path / "h.gguf").exists()


def test_a_prompt_file_that_is_not_prompts_is_one_line(tmp_path, tiny_target):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"text": "no prompt"}\n')
    result = specrun(*train(tiny_target, tmp_path / "h.gguf", bad))
    assert_one_line_error(result, "bad.jsonl:2: expected")


def test_ctrl_c_keeps_the_checkpoint_and_the_run_resumes(tmp_path, tiny_target, prompts):
    out = tmp_path / "head.gguf"
    checkpoint = out.with_name("head.gguf.train") / "checkpoint.pt"
    process = subprocess.Popen(
        [sys.executable, "-m", "specrun", *train(tiny_target, out, prompts, "--minutes", "10")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,  # stopped with Ctrl-C
    )
    deadline = time.monotonic() + 120
    work = out.with_name("head.gguf.train")
    while not any(work.glob("samples-*/shard-*.npz")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # into the training
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "the samples and the checkpoint are kept" in stderr
    assert "Traceback" not in stderr
    assert checkpoint.is_file() and not out.exists()
    resumed = specrun(*train(tiny_target, out, prompts, "--steps", "5"))
    assert resumed.returncode == 0, resumed.stderr
    assert out.is_file()
