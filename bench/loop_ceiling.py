"""The loop's ceiling: what the round loop costs when the models cost nothing.

The real round (speculative.generate, ModelDraft, sampling.verify) runs over the real
runtime.Model bookkeeping; only the native calls (llama_decode, reading logits, dropping
cache positions) are replaced by a NullModel that returns a fixed random table's row
for each position. Draft and target share the table, so every draft is accepted. On a
GPU a 1B draft token takes 2-3 ms and a 70B verify 25 ms: these figures are what the
Python loop adds to them.

    .venv/bin/python bench/loop_ceiling.py [--quick] [--repeats 3] [--tokens 256] [--numpy-sampling]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from specrun import FixedGamma, Model, ModelDraft, Round, SamplingParams, generate
from specrun.core import sampling

VOCABS = (49_152, 152_064)  # SmolLM2, Qwen2.5
CONTEXTS = (512, 4096, 32_768)
GAMMAS = (0, 4, 8)
SAMPLINGS = {
    "greedy": SamplingParams(temperature=0),
    "T=0.8": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=0),
}
TABLE_ROWS = (
    8  # twice over, 10 MB at 152k: it stays in cache, as logits llama.cpp has just written would
)
LEAD = 6.0  # one token's logit above unit noise: greedy follows it, sampling keeps ~40 candidates


def logit_table(n_vocab: int, seed: int = 0) -> np.ndarray:
    """Row r: the logits at any position p with p % rows == r; token r + 1 leads."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((TABLE_ROWS, n_vocab), dtype=np.float32)
    table[np.arange(TABLE_ROWS), (np.arange(TABLE_ROWS) + 1) % TABLE_ROWS] += LEAD
    return table


class NullModel(Model):
    """A Model whose native calls cost nothing: the logits of a position are a table row
    chosen by the position. Every line of Python bookkeeping is Model's own."""

    def __init__(
        self, table: np.ndarray, n_ctx: int, n_batch: int = 512, name: str = "null"
    ) -> None:
        self.name = name
        self.table = np.concatenate([table, table])  # a run of rows past the end wraps around
        self.n_vocab = table.shape[1]
        self.n_ctx = self.n_ctx_train = n_ctx
        self.n_batch = n_batch
        self._ctx = self._model = None
        self._init_cache(n_batch)

    def _decode(self) -> int:
        return 0

    def _outputs(self, count: int) -> np.ndarray:
        """Row p % TABLE_ROWS for each of the last `count` positions p. llama.cpp writes
        its logits during the decode, which costs nothing here: like its buffer, what this
        returns is a view (up to TABLE_ROWS + 1 rows, a round's; a copy beyond)."""
        first = self._batch_pos[self._batch.n_tokens - count] % TABLE_ROWS
        if first + count <= len(self.table):
            return self.table[first : first + count]
        return np.take(self.table, np.arange(first, first + count), axis=0, mode="wrap")

    def _drop(self, keep: int) -> bool:
        return True

    def _clear(self) -> None:
        pass

    def _is_eog(self, token: int) -> bool:
        return False

    def _piece(self, token: int) -> bytes:
        return b" t%d" % token


def run(
    n_vocab: int, context: int, gamma: int, params: SamplingParams, tokens: int, table: np.ndarray
) -> dict[str, float]:
    """One generation after a `context`-token prompt: time per round and per token, of the
    rounds after the first (whose token the prompt's pass chose)."""
    n_ctx = context + tokens + 16
    target = NullModel(table, n_ctx, name="target")
    draft = ModelDraft(NullModel(table, n_ctx, name="draft"), n_vocab) if gamma else None
    prompt = [int(t) for t in np.random.default_rng(1).integers(TABLE_ROWS, n_vocab, context)]
    events = generate(
        target, prompt, draft=draft, params=params, policy=FixedGamma(gamma), max_tokens=tokens
    )
    next(events)  # the prefill, not timed
    assert next(
        events
    ).prompt_pass  # the first token, from the prompt's pass: not a round of the loop
    start = time.perf_counter()
    rounds = [e for e in events if isinstance(e, Round)]
    seconds = time.perf_counter() - start
    committed = sum(len(r.tokens) for r in rounds)
    assert committed == tokens - 1, f"committed {committed} of {tokens - 1} tokens"
    accepted = sum(r.accepted for r in rounds)
    return {
        "us_round": seconds / len(rounds) * 1e6,
        "us_token": seconds / committed * 1e6,
        "tokens_s": committed / seconds,
        "accepted_s": accepted / seconds,
    }


def median_run(repeats: int, *args) -> dict[str, float]:
    runs = [run(*args) for _ in range(repeats)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=3, help="generations per row; the median is shown (3)"
    )
    parser.add_argument(
        "--tokens", type=int, default=256, help="tokens each generation commits (256)"
    )
    parser.add_argument("--quick", action="store_true", help="152k vocabulary, 4k context only")
    parser.add_argument(
        "--numpy-sampling",
        action="store_true",
        help="sampling in numpy, as where specrun/core/_sampling.c was not compiled",
    )
    args = parser.parse_args()
    if args.numpy_sampling:
        sampling._compiled = None
    print(f"sampling: {'compiled' if sampling.compiled() else 'numpy'}")
    vocabs, contexts = ((152_064,), (4096,)) if args.quick else (VOCABS, CONTEXTS)
    print(
        f"median of {args.repeats} generations of {args.tokens} tokens; rounds only: "
        "the prefill and the prompt pass's token excluded"
    )
    print(
        f"{'vocab':>7} {'context':>7} {'sampling':>8} {'γ':>2} {'µs/round':>9} {'µs/token':>9} "
        f"{'tokens/s':>9} {'accepted/s':>10}"
    )
    for n_vocab in vocabs:
        table = logit_table(n_vocab)
        for context in contexts:
            for name, params in SAMPLINGS.items():
                for gamma in GAMMAS:
                    r = median_run(
                        args.repeats, n_vocab, context, gamma, params, args.tokens, table
                    )
                    print(
                        f"{n_vocab:>7} {context:>7} {name:>8} {gamma:>2} {r['us_round']:>9.0f} "
                        f"{r['us_token']:>9.0f} {r['tokens_s']:>9.0f} {r['accepted_s']:>10.0f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
