"""Training an EAGLE-3 head (`specrun.training`) on the tiny target, end to end.

- The torch head computes what llama.cpp's `eagle3` graph computes: the logits of the
  exported file, loaded through specrun's EAGLE-3 path, match the module's at the target-fed
  step and at a step fed with the head's own state.
- A head trained for a few dozen steps on a repetitive text drafts what the target says far
  more often than an untrained one, measured in the round loop, and its output is the
  target's own, token for token (greedy) at every γ.
- Data, checkpoint and resume: a stopped run goes on from its step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specrun.core.loop import Round  # noqa: E402
from specrun.engine import Engine  # noqa: E402
from specrun.errors import SpecrunError  # noqa: E402
from specrun.llama.capture import Capture, Request  # noqa: E402
from specrun.llama.heads import open_eagle3  # noqa: E402
from specrun.llama.model import Model  # noqa: E402
from specrun.options import DraftOptions, Eagle3Head  # noqa: E402
from specrun.training import fit  # noqa: E402
from specrun.training.data import Prompt, Shards  # noqa: E402
from specrun.training.fit import TrainOptions, train_head  # noqa: E402
from specrun.training.gguf_io import read_target, write_head  # noqa: E402
from tests.support.identity import GREEDY  # noqa: E402
from tests.support.tinymodels import write_tiny_model  # noqa: E402

TEXT = "the cat and the dog in the big red road. " * 40
PROMPTS = [Prompt("the cat and the dog", "raw"), Prompt("hello world", "chat")]


def options(**changes: object) -> TrainOptions:
    base = dict(
        prompts=PROMPTS,
        answer_tokens=24,
        minutes=None,
        steps=60,
        window=64,
        batch=4,
        slots=4,
        threads=1,
        learning_rate=3e-3,
        draft_vocab=None,
    )
    return TrainOptions(**(base | changes))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("text") / "repetitive.txt"
    path.write_text(TEXT)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_target, text_file) -> dict[str, fit.Trained]:
    folder = tmp_path_factory.mktemp("heads")
    return {
        steps: train_head(
            tiny_target, folder / f"h{steps}.gguf", options(texts=(text_file,), steps=steps)
        )
        for steps in (1, 80)
    }


def test_the_torch_head_computes_what_llama_cpp_computes(tmp_path, tiny_target):
    weights = read_target(tiny_target)
    layers = (1, 1, 0)
    d2t = np.arange(0, len(weights.embeddings), 2)  # every other token: d2t is exercised
    head = fit.build_head(weights, d2t, layers, torch.device("cpu"))
    with torch.no_grad():  # norms away from 1, so a norm left out shows
        for norm in (head.attn_norm, head.hidden_norm, head.ffn_norm, head.output_norm):
            norm.weight.uniform_(0.5, 1.5)
    path = write_head(
        tmp_path / "h.gguf",
        weights,
        name="parity",
        shape=head.shape,
        tensors={
            k: v.astype(np.float16).astype(np.float32) for k, v in head.gguf_tensors().items()
        },
        d2t=d2t,
    )
    # llama.cpp rounds activations to F16 for F16 weights: logits agree to ~1e-3 of their
    # range (about 20 here); a graph that differs at all is off by whole units.
    with torch.no_grad():  # the module with the file's (F16) weights
        for tensor in head.parameters():
            tensor.copy_(tensor.half().float())
    target = Model(tiny_target, threads=1)
    tokens = target.tokenize("the cat and the dog in the big red road", add_special=True)
    capture = Capture(target, layers, slots=1, length=64)
    [(_, sample)] = capture.generate([Request(tokens, 0, GREEDY)])
    capture.close()
    n = len(tokens) - 2
    with torch.no_grad():
        steps = head.unroll(
            torch.tensor(tokens)[None],
            torch.from_numpy(sample.features[:n].astype(np.float32))[None],
            2,
        )
    native, _ = open_eagle3(path, target)
    features = sample.features.astype(np.float32)
    for root in (0, 3, n - 2):
        native.truncate(0)
        fed = native.feed(0, tokens[1 : root + 2], features[: root + 1], own=False, output=True)
        assert fed is not None
        logits, state = fed[0][d2t].copy(), fed[1].copy()
        np.testing.assert_allclose(logits, steps[0][0, root].numpy(), atol=2e-2, rtol=1e-2)
        own = native.feed(root + 1, [tokens[root + 2]], state[None], own=True, output=True)
        assert own is not None
        np.testing.assert_allclose(own[0][d2t], steps[1][0, root].numpy(), atol=2e-2, rtol=1e-2)
        # Outside the draft vocabulary llama.cpp leaves -inf: the head drafts none of them.
        assert np.isneginf(np.delete(own[0], d2t)).all()
    native.close()
    target.close()


def drafted_and_accepted(target: Path, head: Path, gamma: str) -> tuple[list[int], float]:
    with Engine.load(
        target, Eagle3Head(head), params=GREEDY, drafting=DraftOptions(gamma=gamma)
    ) as engine:
        rounds = [
            e
            for e in engine.stream(engine.prompt("the cat and the dog", raw=True), max_tokens=48)
            if isinstance(e, Round)
        ]
    drafted = sum(r.drafted for r in rounds)
    return [t for r in rounds for t in r.tokens], sum(r.accepted for r in rounds) / max(drafted, 1)


def test_a_trained_head_drafts_what_the_target_says(tiny_target, trained):
    untrained, learned = trained[1], trained[80]
    assert learned.acceptance[0] > untrained.acceptance[0] + 0.3, (learned, untrained)
    _, before = drafted_and_accepted(tiny_target, untrained.path, "3")
    _, after = drafted_and_accepted(tiny_target, learned.path, "3")
    assert after > before + 0.3, (before, after)
    assert after > 0.5


@pytest.mark.parametrize("gamma", ["1", "4", "auto"])
def test_a_trained_head_keeps_greedy_identity(tiny_target, trained, gamma):
    with Engine.load(tiny_target, params=GREEDY) as plain:
        expected = [
            t
            for e in plain.stream(plain.prompt("the cat and the dog", raw=True), max_tokens=48)
            if isinstance(e, Round)
            for t in e.tokens
        ]
    tokens, _ = drafted_and_accepted(tiny_target, trained[80].path, gamma)
    assert tokens == expected


def test_a_stopped_run_resumes_from_its_checkpoint(tmp_path, tiny_target, text_file):
    out = tmp_path / "h.gguf"
    stopped_at = 7

    def stop(progress: fit.Progress) -> None:
        if progress.phase == "train" and progress.step == stopped_at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_head(tiny_target, out, options(texts=(text_file,), steps=20), stop)
    assert not out.exists()
    [samples] = out.with_name("h.gguf.train").glob("samples-*")
    assert len(Shards(samples).done()) > 2 * len(PROMPTS)
    collected: list[float] = []

    def watch(progress: fit.Progress) -> None:
        if progress.phase == "collect":
            collected.append(progress.total - progress.done)

    resumed = train_head(tiny_target, out, options(texts=(text_file,), steps=20), watch)
    assert collected and set(collected) == {0}  # every sample came from the shards
    assert (resumed.resumed_from, resumed.steps) == (stopped_at, 20)
    assert out.is_file()
    collected.clear()  # other data (no text) is collected anew, never taken from those shards
    train_head(tiny_target, out, options(steps=22), watch)
    assert collected[0] > 0 and len(list(out.with_name("h.gguf.train").glob("samples-*"))) == 2


def test_a_trained_head_serves_only_its_target(tmp_path, trained):
    other = write_tiny_model(tmp_path / "other.gguf", seed=5)  # same shape, another model
    with pytest.raises(SpecrunError, match="was made for"):
        Engine.load(other, Eagle3Head(trained[80].path))
