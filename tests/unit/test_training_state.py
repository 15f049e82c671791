"""A training's state on disk (`specrun.training.data.Shards`, `fit.Checkpoint`) and the lock
a run holds on it (`specrun.system.files.held_exclusively`): a stop writes the answers it
has, a shard is never overwritten, a damaged file is one line, and a second holder fails."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from specrun.errors import SpecrunError
from specrun.llama.capture import Request, Sample
from specrun.system.files import held_exclusively
from specrun.training import data
from tests.support.identity import GREEDY


def sample(request: int, length: int = 5) -> tuple[int, Sample]:
    """A sample whose every value says which request it answers."""
    return request, Sample(
        tokens=np.full(length, request, np.int32),
        features=np.full((length, 6), request, np.float16),
        top_ids=np.full((length, 4), request, np.int32),
        top_logprobs=np.full((length, 4), -request, np.float16),
        answer=length // 2,
    )


class StoppedCapture:
    """A capture whose answers come out in order, and a stop after `stop_after` of them: what
    `data.collect` does with a stop is under test, not the decoding."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after

    def generate(self, requests, progress):
        for index, request in enumerate(requests):
            if index == self.stop_after:
                raise KeyboardInterrupt
            yield index, sample(request.tokens[0])[1]


def wanted(count: int) -> list[Request]:
    return [Request([i], 4, GREEDY) for i in range(count)]


def test_a_stop_while_collecting_writes_the_answers_finished_and_a_rerun_takes_the_rest(
    tmp_path,
):
    shards = data.Shards(tmp_path / "samples")
    with pytest.raises(KeyboardInterrupt):
        data.collect(StoppedCapture(stop_after=data.SHARD_SAMPLES + 5), wanted(80), shards)
    assert shards.done() == set(range(data.SHARD_SAMPLES + 5))  # a shard of 32, one of 5
    with pytest.raises(KeyboardInterrupt):  # a stop before a whole shard: 3 answers kept
        data.collect(StoppedCapture(stop_after=3), wanted(80), shards)
    assert len(shards.done()) == data.SHARD_SAMPLES + 8
    samples = data.collect(StoppedCapture(), wanted(80), shards)
    assert [i for i, _ in samples] == list(range(80))  # none lost, none twice
    assert all(int(s.tokens[0]) == i and int(s.features[0, 0]) == i for i, s in samples)
    written = [np.load(f)["requests"] for f in sorted(shards.folder.glob("shard-*.npz"))]
    assert sorted(np.concatenate(written).tolist()) == list(range(80))


def test_a_stop_before_any_answer_writes_no_shard(tmp_path):
    shards = data.Shards(tmp_path / "samples")
    with pytest.raises(KeyboardInterrupt):
        data.collect(StoppedCapture(stop_after=0), wanted(4), shards)
    assert not shards.folder.exists()


def test_a_shard_is_written_after_the_last_not_over_one(tmp_path):
    shards = data.Shards(tmp_path / "samples")
    for first in (0, 2, 4):
        shards.write([sample(first), sample(first + 1)])
    (shards.folder / "shard-00001.npz").unlink()  # removed, as a damaged shard's error says
    shards.write([sample(2), sample(3)])
    assert sorted(p.name for p in shards.folder.glob("*.npz")) == [
        "shard-00000.npz",
        "shard-00002.npz",
        "shard-00003.npz",
    ]
    assert shards.done() == set(range(6))


def test_a_request_written_twice_is_loaded_once(tmp_path):
    shards = data.Shards(tmp_path / "samples")
    shards.write([sample(0), sample(1, length=3)])
    shards.write([sample(1, length=7), sample(2)])  # a stop just after a write, say
    loaded = dict(shards.load())
    assert sorted(loaded) == [0, 1, 2] and len(loaded[1].tokens) == 3


def damage_by_truncating(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def damage_by_rewriting(path: Path, **arrays: np.ndarray) -> None:
    with np.load(path) as saved:
        content = {name: saved[name] for name in saved.files} | arrays
    np.savez(path, **content)


@pytest.mark.parametrize(
    "damage, words",
    [
        (damage_by_truncating, "File is not a zip file"),
        (lambda p: p.write_bytes(b"not a shard"), "pickled"),
        (lambda p: damage_by_rewriting(p, lengths=np.array([5, 500])), "505 positions"),
        (lambda p: damage_by_rewriting(p, requests=np.array([3, 3])), "distinct"),
        (lambda p: damage_by_rewriting(p, answers=np.array([0])), "differ in length"),
        (lambda p: damage_by_rewriting(p, features=np.zeros((10, 6, 2))), "10 positions"),
        (lambda p: damage_by_rewriting(p, top_ids=np.zeros((10, 3))), "different shapes"),
    ],
)
def test_a_damaged_shard_is_a_one_line_error_naming_it_and_the_remedy(tmp_path, damage, words):
    shards = data.Shards(tmp_path / "samples")
    shards.write([sample(0), sample(1)])
    path = shards.folder / "shard-00000.npz"
    damage(path)
    with pytest.raises(SpecrunError) as error:
        shards.done()
        shards.load()
    message = str(error.value)
    assert message.startswith(f"{path} is damaged (") and "\n" not in message
    assert message.endswith("remove it, and the same command collects its answers again")
    assert words in message, message


def test_a_held_lock_refuses_a_second_holder_naming_the_first(tmp_path):
    lock = tmp_path / "work" / "lock"
    with held_exclusively(lock, "the output h.gguf"):
        assert lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(SpecrunError) as error:
            with held_exclusively(lock, "the output h.gguf"):
                pass  # pragma: no cover - never entered
        assert str(error.value) == (
            f"the output h.gguf is in use by another process (pid {os.getpid()})"
        )
    assert not lock.exists()  # released: removed
    with held_exclusively(lock, "the output h.gguf"):  # and taken again
        assert lock.is_file()


def test_a_lock_file_left_behind_is_taken_over(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("999999999\n")  # a holder that died: the OS holds no lock for it
    with held_exclusively(lock, "the output h.gguf"):
        assert lock.read_text() == f"{os.getpid()}\n"


def test_a_lock_in_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecrunError, match="is a regular file, not a folder"):
        with held_exclusively(tmp_path / "file" / "work" / "lock", "the output h.gguf"):
            pass  # pragma: no cover - never entered


def head_and_optimizer():
    torch = pytest.importorskip("torch")
    from specrun.training.gguf_io import HeadShape
    from specrun.training.head import Eagle3Head

    shape = HeadShape(8, 2, 2, 16, (0, 1, 1), draft_vocab=4, rope_base=10000.0, eps=1e-5)
    head = Eagle3Head(shape, torch.zeros(16, 8))
    return head, torch.optim.AdamW(head.parameters())


D2T = np.arange(4)


def test_a_checkpoint_goes_on_from_its_step_and_one_of_other_options_starts_over(tmp_path):
    from specrun.training.fit import Checkpoint

    head, optimizer = head_and_optimizer()
    saved = Checkpoint(tmp_path / "checkpoint.pt")
    saved.save(head, optimizer, 12, 30.0, D2T)
    loaded = Checkpoint(saved.path)
    assert loaded.step is None and loaded.load(head, optimizer, D2T) == (12, 30.0)
    assert loaded.step == 12
    other = Checkpoint(saved.path)
    assert other.load(head, optimizer, D2T + 1) == (0, 0.0) and other.step is None


@pytest.mark.parametrize(
    "damage, words",
    [
        (damage_by_truncating, ""),
        (lambda p: p.write_bytes(os.urandom(3000)), ""),
        (lambda p: __import__("torch").save({"step": 3}, p), "'seconds'"),
        (lambda p: __import__("torch").save([1, 2], p), "list indices"),
        (lambda p: __import__("torch").save({"step": -1, "seconds": 2.0}, p), "step -1"),
    ],
)
def test_a_damaged_checkpoint_is_a_one_line_error_naming_it_and_the_remedy(tmp_path, damage, words):
    from specrun.training.fit import Checkpoint

    head, optimizer = head_and_optimizer()
    checkpoint = Checkpoint(tmp_path / "checkpoint.pt")
    checkpoint.save(head, optimizer, 12, 30.0, D2T)
    damage(checkpoint.path)
    with pytest.raises(SpecrunError) as error:
        Checkpoint(checkpoint.path).load(head, optimizer, D2T)
    message = str(error.value)
    assert message.startswith(f"{checkpoint.path} is damaged (") and "\n" not in message
    assert message.endswith("remove it, and the same command starts the fitting over")
    assert words in message, message


def test_a_stop_says_exactly_what_is_kept(tmp_path):
    pytest.importorskip("torch")
    from specrun.training.fit import Kept

    kept = Kept.of(tmp_path / "h.gguf")
    assert str(kept) == "stopped before collecting: nothing new is kept"
    kept.shards, kept.requests = data.Shards(tmp_path / "h.gguf.train" / "samples-x"), 40
    assert str(kept) == "stopped before any of 40 answers was done: nothing new is kept"
    kept.shards.write([sample(0), sample(7)])
    goes_on = "the same command goes on from them"
    answers = f"2 of 40 answers in {kept.shards.folder}"
    assert str(kept) == f"stopped: {answers} are kept; {goes_on}"
    kept.checkpoint.path.write_bytes(b"of an earlier run")
    assert str(kept) == f"stopped: {answers} and an earlier checkpoint are kept; {goes_on}"
    kept.checkpoint.step = 12  # saved or loaded by this run
    assert str(kept) == (
        f"stopped: the samples and the checkpoint are kept ({answers}, step 12); {goes_on}"
    )
