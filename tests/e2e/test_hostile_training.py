"""`specrun heads train` against what a user's machine does to it: a stop while the target
answers keeps the answers finished and says how many, and the same command goes on from
them with none lost and none twice; a second run on the same output fails at once naming
the first, whose lock a kill does not leave behind; damaged state files are one line.

The runs are stopped at a chosen moment: once the collect bar shows on stderr (read in a
thread, with a deadline), the test waits a second, while 20 short texts are done and 14
long answers are still under way (six seconds of decoding on the tiny target), then signals.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from specrun.training.data import Shards
from tests.support.cli import specrun
from tests.support.processes import default_signals, kill

pytest.importorskip("torch")

DEADLINE = 120.0  # seconds: a fail-safe for what is waited on, never a measurement
PROMPTS, TEXTS = 7, 20  # 14 long answers, 20 texts read at once: 34 requests
REQUESTS = 2 * PROMPTS + TEXTS
STOPPED = re.compile(
    r"specrun: stopped: (\d+) of (\d+) answers in (\S+) are kept; "
    r"the same command goes on from them"
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("inputs")
    prompts, texts = folder / "prompts.jsonl", folder / "texts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"the cat and the dog number {i} says", "template": "raw"}) + "\n"
            for i in range(PROMPTS)
        )
    )
    texts.write_text(
        "".join(json.dumps({"text": f"the sun and the moon {i}"}) + "\n" for i in range(TEXTS))
    )
    return prompts, texts


def train(target: Path, out: Path, inputs: tuple[Path, Path], *options: str) -> list[str]:
    prompts, texts = inputs
    return [
        "heads", "train", str(target), "--out", str(out), "--prompts", str(prompts),
        "--text", str(texts), "--answer-tokens", "896", "--threads", "1", *options,
    ]  # fmt: skip


class Training:
    """`specrun heads train` as a child, its stderr read in a thread as it comes (the bars
    end their updates with a carriage return, not a newline)."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specrun", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=default_signals,  # a suite in a background shell ignores SIGINT
            start_new_session=True,  # a kill on a missed deadline takes the worker too
        )
        self._stderr = bytearray()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        while chunk := self.process.stderr.read1(4096):
            with self._changed:
                self._stderr += chunk
                self._changed.notify_all()

    @property
    def stderr(self) -> str:
        with self._changed:
            return self._stderr.decode(errors="replace")

    def wait_for(self, words: str) -> None:
        """Until `words` show on stderr; past the deadline the run is killed and the test
        fails."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: words.encode() in self._stderr or self.process.poll() is not None,
                DEADLINE,
            )
        if not found or words not in self.stderr:
            kill(self.process)
            raise AssertionError(f"no {words!r} on stderr: {self.stderr[-2000:]}")

    def finish(self) -> tuple[int, str, str]:
        """The exit status, stdout and stderr, once the run ends (killed past the deadline)."""
        try:
            self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            kill(self.process)
            raise AssertionError(f"the run did not end: {self.stderr[-2000:]}") from None
        self._reader.join(DEADLINE)
        assert self.process.stdout is not None
        return self.process.returncode, self.process.stdout.read().decode(), self.stderr


def requests_written(samples: Path) -> list[int]:
    """Every request of every shard, repeats included."""
    return sorted(
        int(i) for shard in samples.glob("shard-*.npz") for i in np.load(shard)["requests"]
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_while_collecting_keeps_the_answers_finished_and_the_run_goes_on_from_them(
    tmp_path, tiny_target, inputs, signum
):
    out = tmp_path / "head.gguf"
    run = Training(train(tiny_target, out, inputs, "--steps", "2"))
    run.wait_for("collect:")
    time.sleep(1.0)  # the texts are done, the long answers under way
    run.process.send_signal(signum)
    status, _, stderr = run.finish()
    assert status == 128 + signum, stderr
    assert "Traceback" not in stderr and stderr.endswith("specrun: interrupted\n"), stderr
    stopped = STOPPED.search(stderr)
    assert stopped, stderr
    kept, requests, samples = int(stopped[1]), int(stopped[2]), Path(stopped[3])
    # Before: nothing under 32 answers was kept. The texts are done, long answers are not.
    assert requests == REQUESTS and TEXTS <= kept < REQUESTS, stderr
    assert requests_written(samples) == sorted(Shards(samples).done())
    assert len(Shards(samples).done()) == kept
    assert not out.exists() and not (out.parent / "head.gguf.train" / "lock").exists()
    resumed = specrun(*train(tiny_target, out, inputs, "--steps", "2"), timeout=DEADLINE)
    assert resumed.returncode == 0, resumed.stderr
    assert f"from {REQUESTS} samples" in resumed.stdout  # none lost, none twice
    assert requests_written(samples) == list(range(REQUESTS))


def test_a_second_run_on_the_same_output_fails_at_once_and_a_killed_run_blocks_no_one(
    tmp_path, tiny_target, inputs
):
    out = tmp_path / "head.gguf"
    lock = tmp_path / "head.gguf.train" / "lock"
    first = Training(train(tiny_target, out, inputs, "--minutes", "10"))
    first.wait_for("collect:")
    holder = int(lock.read_text())  # the worker that runs the command
    second = specrun(*train(tiny_target, out, inputs, "--steps", "2"), timeout=DEADLINE)
    assert second.returncode == 1
    assert second.stderr.splitlines()[-1] == (
        f"specrun: error: the output {out} is in use by another process (pid {holder})"
    ), second.stderr
    assert "Traceback" not in second.stderr
    assert first.process.poll() is None  # the first goes on, its shards its own
    os.kill(holder, signal.SIGKILL)  # no handler runs: only the OS can release the lock
    status, _, stderr = first.finish()
    assert status != 0 and "stopped:" not in stderr, stderr
    assert lock.read_text() == f"{holder}\n"  # left behind, and unlocked
    third = specrun(*train(tiny_target, out, inputs, "--steps", "2"), timeout=DEADLINE)
    assert third.returncode == 0, third.stderr
    assert f"wrote {out}" in third.stdout and f"from {REQUESTS} samples" in third.stdout
    assert not lock.exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_target, inputs) -> Path:
    """A finished run's output folder: its shards and checkpoint, to damage copies of."""
    folder = tmp_path_factory.mktemp("trained")
    done = specrun(*train(tiny_target, folder / "head.gguf", inputs, "--steps", "2"))
    assert done.returncode == 0, done.stderr
    return folder


def truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


@pytest.mark.parametrize(
    "damaged, damage, remedy",
    [
        ("samples-*/shard-00000.npz", truncate, "the same command collects its answers again"),
        ("checkpoint.pt", truncate, "the same command starts the fitting over"),
        ("checkpoint.pt", lambda p: p.write_bytes(b"\x80\x04garbage"), "starts the fitting over"),
    ],
    ids=["shard-truncated", "checkpoint-truncated", "checkpoint-garbage"],
)
def test_damaged_training_state_is_one_line_naming_the_file(
    tmp_path, tiny_target, inputs, trained, damaged, damage, remedy
):
    shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
    [path] = (tmp_path / "head.gguf.train").glob(damaged)
    damage(path)
    result = specrun(*train(tiny_target, tmp_path / "head.gguf", inputs, "--steps", "4"))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"specrun: error: {path} is damaged (") and last.endswith(remedy)
