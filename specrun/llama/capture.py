"""What a head is trained on: the target's hidden states and next-token distributions.

A `Capture` is a second context on a loaded target that keeps, for every position it
decodes, the inputs of the layers an EAGLE-3 head reads and the target's top-k log
probabilities there. It reads each prompt (or a text to learn as it is) in `n_batch`-wide
passes, as prompt evaluation does, and generates the target's own answers for many prompts
at once, one sequence per slot of the batch: on a CPU a pass of 16 positions costs a few
single ones, so answers come several times faster than one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import llama_cpp as llama
import numpy as np

from specrun.core.sampling import SamplingParams, pick
from specrun.errors import SpecrunError
from specrun.llama.batch import Batch, Run
from specrun.llama.diagnose import load_failure
from specrun.llama.model import Model
from specrun.system.interrupts import raise_pending

TOP_K = 32  # the target's distribution kept per position: its most likely tokens


@dataclass
class Sample:
    """One text as the target saw it: position P holds token P, the layer inputs there
    (`features`, float16, the layers side by side) and the target's top-k log probabilities
    for token P + 1. Positions from `answer` on are the target's own generation."""

    tokens: np.ndarray  # int32 [n]
    features: np.ndarray  # float16 [n, layers * n_embd]
    top_ids: np.ndarray  # int32 [n, TOP_K]
    top_logprobs: np.ndarray  # float16 [n, TOP_K]
    answer: int


@dataclass(frozen=True)
class Request:
    """A prompt to answer with up to `max_new` tokens (0: the text is only read), each
    chosen by `params` (its seed included)."""

    tokens: Sequence[int]
    max_new: int
    params: SamplingParams


def top_logprobs(logits: np.ndarray, k: int = TOP_K) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely tokens of each row and their log probabilities, most likely first."""
    logits = np.asarray(logits, np.float32)
    ids = np.argpartition(-logits, k - 1, axis=-1)[..., :k]
    picked = np.take_along_axis(logits, ids, axis=-1)
    order = np.argsort(-picked, axis=-1)
    ids, picked = np.take_along_axis(ids, order, -1), np.take_along_axis(picked, order, -1)
    peak = logits.max(axis=-1, keepdims=True)
    log_total = peak + np.log(np.exp(logits - peak).sum(axis=-1, keepdims=True))
    return ids.astype(np.int32), (picked - log_total).astype(np.float16)


class _Builder:
    """A sample being decoded, block by block."""

    def __init__(self, request: Request, index: int = 0) -> None:
        self.request = request
        self.index = index  # the request's place in what was asked
        self.tokens: list[int] = []
        self.blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.rng = request.params.rng()
        self.answer = len(request.tokens)
        self.next = -1  # the token chosen to decode next

    def add(
        self, tokens: Sequence[int], features: np.ndarray, top: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """Positions decoded: their tokens, layer inputs and top-k (`top_logprobs`)."""
        self.tokens.extend(tokens)
        self.blocks.append((features.astype(np.float16), *top))

    def choose(self, logits: np.ndarray) -> None:
        self.next = pick(logits, self.request.params, self.rng)[0]

    def sample(self) -> Sample:
        features, ids, logprobs = (np.concatenate(column) for column in zip(*self.blocks))
        return Sample(np.asarray(self.tokens, np.int32), features, ids, logprobs, self.answer)


class Capture:
    """A context on `target` with `slots` sequences of up to `length` positions each that
    keeps the inputs of `layers`."""

    def __init__(
        self, target: Model, layers: Sequence[int], *, slots: int = 16, length: int = 1024
    ) -> None:
        if not target.has_layers(layers):
            raise SpecrunError(f"{target.name} has layers 0 to {target.n_layer - 1}: not {layers}")
        self.target = target
        self.layers = tuple(layers)
        self.slots = slots
        self.length = min(length, target.n_ctx)
        params = llama.llama_context_default_params()
        params.n_ctx = self.length * slots
        params.n_batch = params.n_ubatch = self.n_batch = max(target.n_batch, slots)
        params.n_seq_max = slots
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = target.threads
        params.no_perf = True
        self._ctx = llama.llama_init_from_model(target.model, params)
        if not self._ctx:
            raise load_failure(f"cannot create a context of {slots} sequences for {target.name}")
        self._memory = llama.llama_get_memory(self._ctx)
        self.batch = Batch(self._ctx, self.n_batch, target.n_vocab, target.n_embd, target.name)
        self.batch.keep_hidden(self.layers)

    def generate(
        self, requests: Iterable[Request], progress: Callable[[int], None] = lambda n: None
    ) -> Iterator[tuple[int, Sample]]:
        """The target's answers, each with its prompt, as (index of the request, sample) in
        the order they finish; `progress` hears how many positions each pass decoded."""
        pending = enumerate(requests)
        active: dict[int, _Builder] = {}
        exhausted = False
        while True:
            while not exhausted and len(active) < self.slots:
                index, request = next(pending, (-1, None))
                if request is None:
                    exhausted = True
                    break
                slot = next(s for s in range(self.slots) if s not in active)
                tokens = list(request.tokens)[: self.length - request.max_new]
                builder = _Builder(replace(request, tokens=tokens), index)
                progress(self._prefill(slot, builder, tokens))
                active[slot] = builder
            if not active:
                return
            for slot in [s for s, b in active.items() if self._finished(b)]:
                llama.llama_memory_seq_rm(self._memory, slot, -1, -1)
                finished = active.pop(slot)
                yield finished.index, finished.sample()
            if not active:
                continue
            runs = [Run(slot, [b.next], len(b.tokens), 0) for slot, b in active.items()]
            features, logits = self._decode(runs)
            ids, logprobs = top_logprobs(logits)
            progress(len(runs))
            for i, run in enumerate(runs):
                active[run.seq_id].add(
                    run.tokens, features[i : i + 1], (ids[i : i + 1], logprobs[i : i + 1])
                )
                active[run.seq_id].choose(logits[i])

    def _finished(self, builder: _Builder) -> bool:
        done = len(builder.tokens) - builder.answer >= builder.request.max_new
        return done or self.target.is_eog(builder.next) or len(builder.tokens) >= self.length

    def _prefill(self, slot: int, builder: _Builder, tokens: list[int]) -> int:
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            features, logits = self._decode([Run(slot, chunk, start, 0)])
            builder.add(chunk, features, top_logprobs(logits))
        builder.choose(logits[-1])
        return len(tokens)

    def _decode(self, runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
        """Decode the runs in one pass, a row for each position: every row's layer inputs (a
        copy) and logits (llama.cpp's buffer, valid until the next decode), in run order."""
        try:
            self.batch.decode(runs)
        finally:
            raise_pending()
        kept = self.batch.all_hidden()
        rows = np.concatenate([kept[layer] for layer in self.layers], axis=1)
        return rows, self.batch.all_logits()

    def close(self) -> None:
        batch, ctx = getattr(self, "batch", None), getattr(self, "_ctx", None)
        self.batch, self._ctx = None, None  # type: ignore[assignment]
        if batch is not None:
            batch.close()
        if ctx:
            llama.llama_free(ctx)

    def __del__(self) -> None:
        self.close()
