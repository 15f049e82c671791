"""Training an EAGLE-3 head for a GGUF target: collect, prepare, fit, export.

`train_head` runs the four steps (`collect_answers`, `prepare_data`, `fit_head`,
`export_head`); collecting and fitting are resumable: the target's samples are kept in
shards beside the output (`HEAD.train/`), the answers finished so far written on a stop,
the head's weights and optimizer in a checkpoint there, written every minute and on a
stop; a later run with the same output goes on from both (`Kept` says what a stop left).
A run holds an OS lock on that folder from start to end, so a second run on the same
output fails at once instead of mixing its shards and checkpoint with the first's.

The loss is EAGLE-3's: at every unrolled step, the cross-entropy of the head's draft
distribution against the target's (its top-k probabilities on the draft vocabulary),
steps weighted by 0.8^k.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from specrun.errors import SpecrunError
from specrun.llama.capture import Capture, Sample
from specrun.llama.model import Model
from specrun.system.files import held_exclusively, replaced_atomically
from specrun.training import data
from specrun.training.gguf_io import HeadShape, TargetWeights, read_target, write_head
from specrun.training.head import Eagle3Head

Device = Literal["auto", "cpu", "cuda", "mps"]
Phase = Literal["collect", "train"]
STEP_WEIGHT = 0.8  # EAGLE-3's weight of unrolled step k: 0.8^k
COVERAGE = 0.995  # the draft vocabulary covers this share of the target's top-1 tokens
MIN_DRAFT_VOCAB, MAX_DRAFT_VOCAB = 1024, 32768
CHECKPOINT_SECONDS = 60.0
EVALUATIONS = 20  # held-out measurements over a run
HELD_OUT_WINDOWS = 48
SAMPLE_LENGTH = 1024  # a prompt and its answer, at most


@dataclass(frozen=True)
class TrainOptions:
    """How to train; `minutes` and `steps` bound the fitting (the first reached ends it)."""

    texts: Sequence[Path] = ()
    prompts: Sequence[data.Prompt] | None = None  # None: the project's prompt set
    answer_tokens: int = 256
    minutes: float | None = 40.0
    steps: int | None = None
    draft_vocab: int | None = None  # None: the tokens covering COVERAGE of the targets
    unrolled: int = 4  # training-time-test steps
    window: int = 256
    batch: int = 8
    learning_rate: float = 1e-3
    slots: int = 16
    device: Device = "auto"
    threads: int | None = None
    seed: int = 0
    layers: tuple[int, int, int] | None = None  # None: as llama.cpp's converter picks them


@dataclass
class Progress:
    """What a run has done: in `collect`, positions decoded of `total`; in `train`, the
    share of the budget spent, the step, the loss and the held-out acceptance per step."""

    phase: Phase
    done: float
    total: float
    step: int = 0
    loss: float | None = None
    acceptance: tuple[float, ...] = ()
    positions_per_second: float = 0.0


@dataclass
class Trained:
    path: Path
    steps: int
    resumed_from: int
    samples: int
    positions: int
    draft_vocab: int
    acceptance: tuple[float, ...] = ()
    initial_acceptance: tuple[float, ...] = ()  # before the first step (a fresh run)
    collect_seconds: float = 0.0
    train_seconds: float = 0.0


def work_folder(out: Path) -> Path:
    """Where a run that writes the head `out` keeps its samples, checkpoint and lock."""
    return out.with_name(out.name + ".train")


def default_layers(n_layer: int) -> tuple[int, int, int]:
    """The layers llama.cpp's converter gives a head without its own list."""
    return (min(2, n_layer - 1), n_layer // 2, max(n_layer - 3, 0))


def pick_device(device: Device) -> torch.device:
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        return torch.device("mps" if mps is not None and mps.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecrunError("--device cuda: this torch build sees no CUDA device")
    if device == "mps" and not torch.backends.mps.is_available():
        raise SpecrunError("--device mps: this torch build sees no Metal device")
    return torch.device(device)


def draft_vocabulary(samples: Sequence[Sample], n_vocab: int, size: int | None) -> np.ndarray:
    """The target ids the head drafts, ascending: the most frequent top-1 tokens, as many
    as cover COVERAGE of them (or `size`, which `check_draft_vocab` admitted)."""
    counts = np.zeros(n_vocab, np.int64)
    for sample in samples:
        counts += np.bincount(sample.top_ids[:, 0], minlength=n_vocab)
    order = np.argsort(-counts, kind="stable")
    if size is None:
        covered = np.cumsum(counts[order]) / max(counts.sum(), 1)
        size = int(np.searchsorted(covered, COVERAGE)) + 1
        size = min(max(size, MIN_DRAFT_VOCAB), MAX_DRAFT_VOCAB)
        size = min(-(-size // 64) * 64, n_vocab)  # a round width for the kernels
    return np.sort(order[:size])


def check_draft_vocab(size: int | None, n_vocab: int) -> None:
    """A draft vocabulary asked for is 1 to the target's tokens: checked before collecting."""
    if size is not None and not 1 <= size <= n_vocab:
        raise SpecrunError(f"the draft vocabulary is 1 to {n_vocab} tokens, not {size}")


@dataclass
class Batch:
    tokens: torch.Tensor  # [b, n + unrolled + 1]
    features: torch.Tensor  # [b, n, width] float16
    target_ids: torch.Tensor  # [b, n + unrolled + 1, k] draft ids, -1 outside the vocabulary
    target_probs: torch.Tensor  # [b, n + unrolled + 1, k]
    lengths: torch.Tensor  # [b] positions of the sample from the window's start


def batches(
    samples: Sequence[Sample], to_draft: np.ndarray, window: int, size: int, unrolled: int
) -> list[Batch]:
    """The samples cut in windows, grouped by length into batches."""
    windows = [
        (sample, start, min(window, len(sample.tokens) - 1 - start))
        for sample in samples
        for start in range(0, len(sample.tokens) - 1, window)
    ]
    windows.sort(key=lambda w: w[2])
    out = []
    for first in range(0, len(windows), size):
        group = windows[first : first + size]
        n = max(length for _, _, length in group)
        span = n + unrolled + 1
        k = group[0][0].top_ids.shape[1]
        tokens = np.zeros((len(group), span), np.int64)
        features = np.zeros((len(group), n, group[0][0].features.shape[1]), np.float16)
        ids = np.full((len(group), span, k), -1, np.int64)
        probs = np.zeros((len(group), span, k), np.float32)
        lengths = np.zeros(len(group), np.int64)
        for row, (sample, start, length) in enumerate(group):
            end = min(start + span, len(sample.tokens))
            tokens[row, : end - start] = sample.tokens[start:end]
            features[row, :length] = sample.features[start : start + length]
            ids[row, : end - start] = to_draft[sample.top_ids[start:end]]
            probs[row, : end - start] = np.exp(sample.top_logprobs[start:end].astype(np.float32))
            lengths[row] = len(sample.tokens) - start
        out.append(
            Batch(
                torch.from_numpy(tokens),
                torch.from_numpy(features),
                torch.from_numpy(ids),
                torch.from_numpy(probs),
                torch.from_numpy(lengths),
            )
        )
    return out


def unrolled_loss(
    head: Eagle3Head, batch: Batch, unrolled: int, device: torch.device, *, measure: bool = False
) -> tuple[torch.Tensor, list[float]]:
    """EAGLE-3's loss over the batch, and with `measure` the share of roots per step whose
    draft is the target's most likely token (teacher-forced: each step's acceptance alone)."""
    n = batch.features.shape[1]
    tokens = batch.tokens.to(device)
    features = batch.features.to(device, torch.float32)
    ids, probs = batch.target_ids.to(device), batch.target_probs.to(device)
    lengths = batch.lengths.to(device)[:, None]
    roots = torch.arange(n, device=device)
    total = torch.zeros((), device=device)
    accepted = []
    for step, logits in enumerate(head.unroll(tokens, features, unrolled)):
        # Root P's step predicts the token after position P + step + 1, from that position's
        # target distribution; it exists where that position is in the sample.
        valid = (roots[None, :] + step + 1) < lengths
        target_ids = ids[:, step + 1 : step + 1 + n]
        target_probs = probs[:, step + 1 : step + 1 + n] * (target_ids >= 0)
        logq = torch.log_softmax(logits.float(), -1)
        picked = logq.gather(-1, target_ids.clamp(min=0))
        loss = -(picked * target_probs).sum(-1)
        count = valid.sum().clamp(min=1)
        total = total + STEP_WEIGHT**step * (loss * valid).sum() / count
        if measure:
            hits = (logits.argmax(-1) == target_ids[..., 0]) & valid
            accepted.append(float(hits.sum()) / float(count))
    return total, accepted


def schedule(fraction: float, peak: float) -> float:
    """Warm up over the first 3%, then a cosine down to a tenth of the peak."""
    if fraction < 0.03:
        return peak * (0.1 + 0.9 * fraction / 0.03)
    turn = (fraction - 0.03) / 0.97
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * min(turn, 1.0))))


def build_head(
    weights: TargetWeights, d2t: np.ndarray, layers: tuple[int, int, int], device: torch.device
) -> Eagle3Head:
    """A head of the target's width, its output starting from the target's own rows."""
    shape = HeadShape(
        n_embd=weights.n_embd,
        n_head=weights.n_head,
        n_head_kv=weights.n_head_kv,
        n_ff=weights.n_ff,
        target_layers=layers,
        draft_vocab=len(d2t),
        rope_base=weights.rope_base,
        eps=weights.eps,
    )
    head = Eagle3Head(shape, torch.from_numpy(weights.embeddings))
    output = weights.output if weights.output is not None else weights.embeddings
    with torch.no_grad():
        head.lm_head.weight.copy_(torch.tensor(output[d2t]))
        head.output_norm.weight.copy_(torch.tensor(weights.output_norm))
    return head.to(device)


class Checkpoint:
    """The head's weights, optimizer, step and seconds spent, in one file; `step` is the
    step of the file as this run last loaded or saved it (None before either)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.step: int | None = None

    def save(
        self,
        head: Eagle3Head,
        optimizer: torch.optim.Optimizer,
        step: int,
        seconds: float,
        d2t: np.ndarray,
    ) -> None:
        with replaced_atomically(self.path) as temporary:
            torch.save(
                {
                    "shape": head.shape.as_dict(),
                    "d2t": d2t,
                    "model": head.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "step": step,
                    "seconds": seconds,
                },
                temporary,
            )
        self.step = step

    def load(
        self, head: Eagle3Head, optimizer: torch.optim.Optimizer, d2t: np.ndarray
    ) -> tuple[int, float]:
        """The step and seconds to go on from: (0, 0) without a checkpoint of this head (one
        of other options is replaced at the first save). Saves are atomic, so a file that does
        not read back whole was damaged after the fact: a one-line error, never a silent
        start over that would replace hours of training."""
        if not self.path.exists():
            return 0, 0.0
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=False)
            step, seconds = int(saved["step"]), float(saved["seconds"])
            if step < 0 or not 0 <= seconds < math.inf:
                raise ValueError(f"step {step} after {seconds} s")
            if saved["shape"] != head.shape.as_dict() or not np.array_equal(saved["d2t"], d2t):
                return 0, 0.0
            head.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
        except Exception as error:  # torch.load and pickle raise a dozen kinds on damage
            remedy = "remove it, and the same command starts the fitting over"
            raise data.damaged(self.path, error, remedy) from None
        self.step = step
        return step, seconds


@dataclass
class Kept:
    """Where a run keeps its work for the same command to go on from, filled in as the run
    gets there; after a stop, `str` says what there is."""

    checkpoint: Checkpoint
    shards: data.Shards | None = None  # this run's answers, once its requests are known
    requests: int = 0

    @classmethod
    def of(cls, out: Path) -> Kept:
        """For a run that writes the head `out`."""
        return cls(Checkpoint(work_folder(out) / "checkpoint.pt"))

    def __str__(self) -> str:
        if self.shards is None:
            return "stopped before collecting: nothing new is kept"
        done = len(self.shards.done())
        if not done:
            return f"stopped before any of {self.requests} answers was done: nothing new is kept"
        answers = f"{done} of {self.requests} answers in {self.shards.folder}"
        goes_on = "the same command goes on from them"
        if self.checkpoint.step is not None:
            return (
                f"stopped: the samples and the checkpoint are kept ({answers}, step "
                f"{self.checkpoint.step}); {goes_on}"
            )
        if self.checkpoint.path.exists():
            return f"stopped: {answers} and an earlier checkpoint are kept; {goes_on}"
        return f"stopped: {answers} are kept; {goes_on}"


@dataclass(frozen=True)
class Collected:
    """The target's answers: (request index, sample) in request order, of `requests` asked."""

    samples: list[tuple[int, Sample]]
    requests: int
    layers: tuple[int, int, int]  # the target layers whose inputs each sample holds
    seconds: float


@dataclass(frozen=True)
class Prepared:
    """What the head learns from: the draft vocabulary (its target ids, ascending), the
    training samples and their windows in batches, and the held-out batches it is measured on."""

    d2t: np.ndarray
    train: list[Sample]
    train_batches: list[Batch]
    held_batches: list[Batch]


@dataclass(frozen=True)
class Fitted:
    """The head as the fitting left it, and what the fitting did."""

    head: Eagle3Head
    steps: int
    resumed_from: int
    seconds: float
    acceptance: tuple[float, ...]
    initial_acceptance: tuple[float, ...]  # before the first step (a fresh run)


@dataclass(frozen=True)
class Budget:
    """What bounds the fitting: steps, seconds or both, the first reached ending it."""

    steps: int | None
    seconds: float  # math.inf without a time bound

    @classmethod
    def of(cls, options: TrainOptions) -> Budget:
        return cls(options.steps, (options.minutes or math.inf) * 60)

    def spent(self, step: int, seconds: float) -> float:
        """The share of the budget that `step` steps in `seconds` have used, 0 to 1."""
        by_steps = step / self.steps if self.steps else 0.0
        return min(max(by_steps, seconds / self.seconds), 1.0)


def collect_answers(
    target: Path,
    work: Path,
    options: TrainOptions,
    on_progress: Callable[[Progress], None],
    kept: Kept | None = None,
) -> Collected:
    """The target's answers to the prompts and texts, with each position's layer inputs and
    top-k log probabilities, kept in shards under `work` so that a later run resumes (and
    named in `kept` once known)."""
    start = time.perf_counter()
    model = Model(target, threads=options.threads, n_ctx=SAMPLE_LENGTH)
    try:
        check_draft_vocab(options.draft_vocab, model.n_vocab)
        layers = options.layers or default_layers(model.n_layer)
        prompts = data.default_prompts() if options.prompts is None else options.prompts
        texts = data.read_texts(model, options.texts, options.window * 4)
        wanted = data.requests(model, prompts, texts, options.answer_tokens)
        shards = data.Shards(work / f"samples-{data.fingerprint(wanted)}")
        if kept is not None:
            kept.shards, kept.requests = shards, len(wanted)
        capture = Capture(model, layers, slots=options.slots, length=SAMPLE_LENGTH)
        try:
            samples = data.collect(
                capture,
                wanted,
                shards,
                lambda done, total: on_progress(Progress("collect", done, total)),
            )
        finally:
            capture.close()
    finally:
        model.close()
    return Collected(samples, len(wanted), layers, time.perf_counter() - start)


def prepare_data(collected: Collected, n_vocab: int, options: TrainOptions) -> Prepared:
    """The held-out requests set apart, the draft vocabulary chosen from the others' answers,
    and both cut in windows and batches."""
    train = [s for i, s in collected.samples if not data.held_out(i, collected.requests)]
    held = [s for i, s in collected.samples if data.held_out(i, collected.requests)]
    if not train:
        raise SpecrunError("no samples to learn from: give prompts or --text")
    d2t = draft_vocabulary(train, n_vocab, options.draft_vocab)
    to_draft = np.full(n_vocab, -1, np.int64)
    to_draft[d2t] = np.arange(len(d2t))
    train_batches = batches(train, to_draft, options.window, options.batch, options.unrolled)
    held_batches = batches(held, to_draft, options.window, options.batch, options.unrolled)
    held_batches = held_batches[:: max(1, len(held_batches) * options.batch // HELD_OUT_WINDOWS)]
    return Prepared(d2t, train, train_batches, held_batches)


def held_out_acceptance(
    head: Eagle3Head, held_batches: Sequence[Batch], unrolled: int, device: torch.device
) -> tuple[float, ...]:
    """Per unrolled step, the share of held-out roots whose draft is the target's top token."""
    head.eval()
    sums = np.zeros(unrolled)
    with torch.no_grad():
        for batch in held_batches:
            sums += unrolled_loss(head, batch, unrolled, device, measure=True)[1]
    head.train()
    return tuple(sums / max(len(held_batches), 1))


def optimizer_step(
    head: Eagle3Head,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    learning_rate: float,
    unrolled: int,
    device: torch.device,
) -> float:
    """One step on `batch` at `learning_rate`; the batch's loss before it."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    loss, _ = unrolled_loss(head, batch, unrolled, device)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


def fit_head(
    head: Eagle3Head,
    prepared: Prepared,
    checkpoint: Checkpoint,
    options: TrainOptions,
    device: torch.device,
    on_progress: Callable[[Progress], None],
) -> Fitted:
    """Train `head` until the budget is spent, going on from the checkpoint of this head where
    there is one, saving it every CHECKPOINT_SECONDS of training and on a stop."""
    optimizer = torch.optim.AdamW(head.parameters(), lr=options.learning_rate, weight_decay=0.0)
    step, seconds = checkpoint.load(head, optimizer, prepared.d2t)
    resumed_from, resumed_seconds = step, seconds
    budget = Budget.of(options)

    def evaluate() -> tuple[float, ...]:
        return held_out_acceptance(head, prepared.held_batches, options.unrolled, device)

    rng = np.random.default_rng(options.seed + step)
    initial = evaluate() if step == 0 else ()
    acceptance: tuple[float, ...] = ()
    last_saved = seconds
    next_evaluation = math.floor(budget.spent(step, seconds) * EVALUATIONS) + 1
    positions = 0  # trained on in this run, over its training seconds
    clock = time.perf_counter()
    try:
        while budget.spent(step, seconds) < 1.0:
            for index in rng.permutation(len(prepared.train_batches)):
                fraction = budget.spent(step, seconds)
                if fraction >= 1.0:
                    break
                batch = prepared.train_batches[index]
                rate = schedule(fraction, options.learning_rate)
                loss = optimizer_step(head, optimizer, batch, rate, options.unrolled, device)
                step += 1
                positions += int(batch.features.shape[0] * batch.features.shape[1])
                now = time.perf_counter()
                seconds += now - clock
                clock = now
                if budget.spent(step, seconds) * EVALUATIONS >= next_evaluation:
                    next_evaluation += 1
                    acceptance = evaluate()
                    clock = time.perf_counter()  # measuring is not training
                if seconds - last_saved >= CHECKPOINT_SECONDS:
                    checkpoint.save(head, optimizer, step, seconds, prepared.d2t)
                    last_saved = seconds
                per_second = positions / max(seconds - resumed_seconds, 1e-9)
                done = budget.spent(step, seconds)
                on_progress(Progress("train", done, 1.0, step, loss, acceptance, per_second))
    except KeyboardInterrupt:
        checkpoint.save(head, optimizer, step, seconds, prepared.d2t)
        raise
    checkpoint.save(head, optimizer, step, seconds, prepared.d2t)
    if not acceptance or next_evaluation <= EVALUATIONS:
        acceptance = evaluate()
    return Fitted(head, step, resumed_from, seconds, acceptance, initial)


def export_head(
    out: Path, target: Path, weights: TargetWeights, head: Eagle3Head, d2t: np.ndarray
) -> None:
    """The head as the GGUF llama.cpp's converter writes for an EAGLE-3 checkpoint, at `out`."""
    write_head(
        out,
        weights,
        name=f"{weights.name or target.stem} EAGLE-3 head",
        shape=head.shape,
        tensors=head.gguf_tensors(),
        d2t=d2t,
    )


def train_head(
    target: Path,
    out: Path,
    options: TrainOptions = TrainOptions(),
    on_progress: Callable[[Progress], None] = lambda progress: None,
    kept: Kept | None = None,
) -> Trained:
    """Train an EAGLE-3 head for the GGUF `target` and write it to `out`: the target's answers
    collected, prepared as batches, the head fitted to them and exported, under the lock of
    `out`'s work folder. `kept`, if given, follows what a stop would leave."""
    if options.minutes is None and options.steps is None:
        raise SpecrunError("training needs a bound: `minutes` or `steps`")
    work = work_folder(out)
    kept = kept or Kept.of(out)
    try:
        with held_exclusively(work / "lock", f"the output {out}"):
            return _train_head(target, out, work, options, on_progress, kept)
    finally:
        with contextlib.suppress(OSError):
            work.rmdir()  # only if empty: a run that failed before collecting leaves nothing


def _train_head(
    target: Path,
    out: Path,
    work: Path,
    options: TrainOptions,
    on_progress: Callable[[Progress], None],
    kept: Kept,
) -> Trained:
    device = pick_device(options.device)
    if options.threads:
        torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    collected = collect_answers(target, work, options, on_progress, kept)
    weights = read_target(target)
    prepared = prepare_data(collected, len(weights.embeddings), options)
    head = build_head(weights, prepared.d2t, collected.layers, device)
    fitted = fit_head(head, prepared, kept.checkpoint, options, device, on_progress)
    export_head(out, target, weights, fitted.head, prepared.d2t)
    return Trained(
        path=out,
        steps=fitted.steps,
        resumed_from=fitted.resumed_from,
        samples=len(collected.samples),
        positions=sum(len(s.tokens) for s in prepared.train),
        draft_vocab=len(prepared.d2t),
        acceptance=fitted.acceptance,
        initial_acceptance=fitted.initial_acceptance,
        collect_seconds=collected.seconds,
        train_seconds=fitted.seconds,
    )
