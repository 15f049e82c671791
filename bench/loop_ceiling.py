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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

import numpy as np

from specrun import FixedGamma, Model, ModelDraft, Round, SamplingParams, generate
from specrun.core import sampling
from specrun.core.drafting import DraftSource, Proposal, as_proposal
from specrun.core.sampling import CandidateRows, candidate_width
from specrun.core.trees import DraftTree
from specrun.llama.batch import Batch
from specrun.llama.model import SequenceCache
from specrun.llama.samplers import BackendSamplers

VOCABS = (49_152, 152_064)  # SmolLM2, Qwen2.5
CONTEXTS = (512, 4096, 32_768)
GAMMAS = (0, 4, 8)
ROWS = ("whole", "device")  # who finds a row's best: the loop, or the device (backend sampling)
SAMPLINGS = {
    "greedy": SamplingParams(temperature=0),
    "T=0.8": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=0),
}
TABLE_ROWS = (
    8  # twice over, 10 MB at 152k: it stays in cache, as logits llama.cpp has just written would
)
LEAD = 6.0  # one token's logit above unit noise: greedy follows it, sampling keeps ~40 candidates


class LogitTable:
    """Row r: the logits at any position p with p % rows == r; token r + 1 leads. Twice
    over, so that a run of rows past the end wraps around; with each row's best candidates
    as a device would choose them, per width, chosen once."""

    def __init__(self, n_vocab: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        table = rng.standard_normal((TABLE_ROWS, n_vocab), dtype=np.float32)
        table[np.arange(TABLE_ROWS), (np.arange(TABLE_ROWS) + 1) % TABLE_ROWS] += LEAD
        self.rows = np.concatenate([table, table])
        self._chosen: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def n_vocab(self) -> int:
        return int(self.rows.shape[1])

    def candidates(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Each row's `width` best (ids, logits), kept a vocabulary apart, as in llama.cpp's
        buffer of sampled candidates."""
        if width not in self._chosen:
            ids = np.zeros(self.rows.shape, np.int32)
            ids[:, :width] = np.argpartition(-self.rows, width, axis=1)[:, :width]
            values = np.zeros_like(self.rows)
            values[:, :width] = np.take_along_axis(self.rows, ids[:, :width], axis=1)
            self._chosen[width] = ids, values
        return self._chosen[width]


def logit_table(n_vocab: int, seed: int = 0) -> LogitTable:
    return LogitTable(n_vocab, seed)


class NullBatch(Batch):
    """A batch whose decode costs nothing: the logits of a position are a table row chosen by
    the position (set by `NullModel`). Filling it is Batch's own code."""

    logit_table: LogitTable

    def _decode(self) -> int:
        return 0

    def _first_row(self, count: int) -> int:
        return int(self._pos[self.native.n_tokens - count] % TABLE_ROWS)

    def _outputs(self, count: int) -> np.ndarray:
        """Row p % TABLE_ROWS for each of the last `count` positions p. llama.cpp writes
        its logits during the decode, which costs nothing here: like its buffer, what this
        returns is a view (up to TABLE_ROWS + 1 rows, a round's; a copy beyond)."""
        table = self.logit_table.rows
        first = self._first_row(count)
        if first + count <= len(table):
            return table[first : first + count]
        return np.take(table, np.arange(first, first + count), axis=0, mode="wrap")

    def _candidates(self, count: int, width: int, after: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The candidates of the decode's rows: views, as of llama.cpp's buffers."""
        ids, values = self.logit_table.candidates(width)
        first = self._first_row(count + after)
        rows = len(self.logit_table.rows)
        if first + count > rows:
            wrapped = np.arange(first, first + count) % rows
            return ids[wrapped, :width], values[wrapped, :width]
        return ids[first : first + count, :width], values[first : first + count, :width]


class NullSamplers(BackendSamplers):
    """The table's candidates are chosen for any width asked: nothing to attach."""

    def attach(self, seq_id: int, width: int | None) -> None:
        pass


class NullModel(Model):
    """A Model whose native calls cost nothing (`NullBatch`). Every line of Python
    bookkeeping is Model's own. With `on_device`, it samples on its device as a GPU does:
    each row's best candidates are chosen in the (free) decode, and read from a buffer laid
    out as llama.cpp's."""

    batch_type = NullBatch

    def __init__(
        self,
        table: LogitTable,
        n_ctx: int,
        n_batch: int = 512,
        name: str = "null",
        on_device: bool = False,
        branches: int = 0,
    ) -> None:
        self.name = name
        self.n_vocab = table.n_vocab
        self.n_embd = 0
        self.n_ctx = self.n_ctx_train = n_ctx
        self.n_batch = n_batch
        self._ctx = self._model = None
        self._init_cache(n_batch, branches=branches)
        self.batch.logit_table = table
        self.samplers = NullSamplers(None, name)
        self.samples_on_device = on_device

    def _drop(self, cache: SequenceCache, keep: int) -> bool:
        return True

    def _clear(self) -> None:
        pass

    def _copy_cells(self, source: int, destination: int, start: int, end: int) -> None:
        pass

    def _drop_sequence(self, seq_id: int) -> None:
        pass

    def _is_eog(self, token: int) -> bool:
        return False

    def _piece(self, token: int) -> bytes:
        return b" t%d" % token


class TableTree:
    """Trees of γ nodes and `leaves` branches after any text: the table's continuation (the
    token each position's row leads with) as the first branch, a decoy token at depth 1 as
    each other: the shape a lookup or suffix tree verifies, at no cost of its own."""

    name = "table-tree"
    kind = "lookup"

    def __init__(self, n_vocab: int, leaves: int) -> None:
        self.n_vocab = n_vocab
        self.leaves = leaves

    def prefill(self, ctx: Sequence[int]) -> None:
        pass

    def propose(self, *args: object, **keywords: object) -> Proposal:
        raise AssertionError("a tree source is asked for trees")

    def propose_tree(self, ctx: Sequence[int], n: int, leaves: int) -> Proposal:
        decoys = min(leaves - 1, n - 1)
        first = len(ctx) - 1  # the row that chooses the first draft
        chain = [(first + d + 1) % TABLE_ROWS for d in range(n - decoys)]
        tokens = [*chain, *((chain[0] + 1 + k) % self.n_vocab for k in range(decoys))]
        parents = [*range(-1, len(chain) - 1), *([-1] * decoys)]
        return as_proposal(DraftTree(tuple(tokens), tuple(parents)))


@dataclass(frozen=True)
class Measured:
    """One configuration's generations: its rate, and per round how many rows each step
    handled (drafted rows, target rows read), for the breakdown."""

    us_round: float
    us_token: float
    tokens_s: float
    accepted_s: float
    draft_rows: float  # a round's draft tokens: one row each
    target_rows: float  # a round's target rows read: the accepted drafts and one more


def run(
    table: LogitTable,
    context: int,
    gamma: int,
    params: SamplingParams,
    tokens: int,
    on_device: bool = False,
    leaves: int = 0,
) -> Measured:
    """One generation after a `context`-token prompt: time per round and per token, of the
    rounds after the first (whose token the prompt's pass chose). `leaves`: the drafts are
    trees of that many branches (TableTree), verified in one pass."""
    n_ctx = context + tokens + 16
    n_vocab = table.n_vocab
    width = candidate_width(params, n_vocab)
    if on_device and width:
        table.candidates(width)  # the device's work, chosen before the clock starts
    target = NullModel(table, n_ctx, name="target", on_device=on_device, branches=leaves)
    draft: DraftSource | TableTree | None = (
        ModelDraft(NullModel(table, n_ctx, name="draft", on_device=on_device), n_vocab)
        if gamma
        else None
    )
    if gamma and leaves:
        draft = TableTree(n_vocab, leaves)
    prompt = [int(t) for t in np.random.default_rng(1).integers(TABLE_ROWS, n_vocab, context)]
    events = generate(
        target,
        prompt,
        draft=cast(DraftSource | None, draft),
        params=params,
        policy=FixedGamma(gamma),
        max_tokens=tokens,
    )
    next(events)  # the prefill, not timed
    first = next(events)
    assert isinstance(first, Round) and first.prompt_pass  # its token is the prompt pass's
    start = time.perf_counter()
    rounds = [e for e in events if isinstance(e, Round)]
    seconds = time.perf_counter() - start
    committed = sum(len(r.tokens) for r in rounds)
    assert committed == tokens - 1, f"committed {committed} of {tokens - 1} tokens"
    accepted = sum(r.accepted for r in rounds)
    return Measured(
        us_round=seconds / len(rounds) * 1e6,
        us_token=seconds / committed * 1e6,
        tokens_s=committed / seconds,
        accepted_s=accepted / seconds,
        draft_rows=sum(r.drafted for r in rounds) / len(rounds),
        target_rows=sum(r.accepted + 1 for r in rounds) / len(rounds),
    )


def median_run(repeats: int, *args: Any) -> Measured:
    runs = [run(*args) for _ in range(repeats)]
    return Measured(
        *(statistics.median(getattr(r, f.name) for r in runs) for f in fields(Measured))
    )


def microseconds(step: Callable[[int], object], repeats: int = 240) -> float:
    """The median time of `step(i)`, in µs, over i = 0, 1, ...: a step given a table row
    takes row i, so that it meets its rows in the caches as the loop does, mostly not."""
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        step(i % (2 * TABLE_ROWS))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


@dataclass(frozen=True)
class Breakdown:
    """Where a round's time goes, µs: each step's unit cost, measured beside the loop on the
    same table, times how often a round takes it; Python is what remains of the round."""

    copy: float  # candidates out of the device's buffer (backend sampling)
    scan: float  # searching whole rows for their best (the loop's own, without it)
    chain: float  # top-p, min-p and temperature on the candidates, p and q
    accept: float  # the accept/reject rule, the residual and the draw, in verify's call
    python: float  # the rest: the loop, Model's bookkeeping, drafting, the text


def breakdown(
    table: LogitTable, params: SamplingParams, measured: Measured, on_device: bool
) -> Breakdown:
    rows = table.rows
    n = round(measured.target_rows) - 1  # a verify's drafts: every one accepted here
    drafts = [int(np.argmax(row)) for row in rows[:n]]
    k = candidate_width(params, table.n_vocab) or table.n_vocab
    ids, values = table.candidates(k)

    def chosen(first: int, count: int) -> CandidateRows:
        """What Model.logits copies out of the device's buffers for `count` rows."""
        out = CandidateRows(np.empty((count, k), np.int32), np.empty((count, k), np.float32))
        out.ids[:] = ids[first : first + count, :k]
        out.logits[:] = values[first : first + count, :k]
        return out

    if params.greedy:
        scan_draft = microseconds(lambda i: np.argmax(rows[i]))  # ModelDraft's greedy pick
        scan_target = microseconds(lambda i: sampling.greedy_choice(rows[i]))
        chain = chain_in_verify = 0.0
    else:
        # A draft token's chain is a call of its own; a verified row's, inside verify's call.
        chain = microseconds(lambda i: sampling.distribution(chosen(i, 1)[0], params))
        scan_draft = scan_target = (
            microseconds(lambda i: sampling.distribution(rows[i], params)) - chain
        )
        chain_in_verify = chain_cost(chosen(0, 2 * TABLE_ROWS), params)
    candidates = chosen(0, n + 1)
    target: sampling.Rows = candidates if on_device else rows[: n + 1]
    if params.greedy:
        verified = microseconds(lambda i: sampling.verify_greedy(target, drafts))
    else:
        qs = [sampling.distribution(candidates[i], params) for i in range(n)]
        rng = np.random.default_rng(0)
        verified = microseconds(lambda i: sampling.verify(target, drafts, qs, params, rng))
    steps = {
        "copy": measured.draft_rows * microseconds(lambda i: chosen(i % TABLE_ROWS, 1))
        + microseconds(lambda i: chosen(i % TABLE_ROWS, n + 1))
        if on_device
        else 0.0,
        "scan": 0.0
        if on_device
        else measured.draft_rows * scan_draft + measured.target_rows * scan_target,
        "chain": measured.draft_rows * chain + measured.target_rows * chain_in_verify,
        "accept": verified
        - measured.target_rows * chain_in_verify
        - (0.0 if on_device else measured.target_rows * scan_target),
    }
    steps = {name: max(value, 0.0) for name, value in steps.items()}
    return Breakdown(**steps, python=max(measured.us_round - sum(steps.values()), 0.0))


def chain_cost(candidates: CandidateRows, params: SamplingParams) -> float:
    """The compiled chain on one row of candidates, as verify's call runs it: µs."""
    compiled = sampling._compiled
    if compiled is None:
        return microseconds(lambda i: sampling.distribution(candidates[i], params))
    k = candidates.ids.shape[1]
    ids, probs = np.empty(k, np.int64), np.empty(k)
    return microseconds(
        lambda i: compiled.distribution(
            candidates.logits[i],
            candidates.ids[i],
            k,
            params.top_p,
            params.min_p,
            params.temperature,
            ids,
            probs,
        )
    )


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
        "--rows",
        choices=(*ROWS, "both"),
        default="both",
        help="whole: the loop searches whole rows (a CPU's backend); device: the device "
        "chooses each row's candidates (backend sampling, a GPU's); both (default)",
    )
    parser.add_argument(
        "--tree",
        type=int,
        default=0,
        metavar="LEAVES",
        help="drafts as token trees of LEAVES branches (the table's continuation and decoys), "
        "the rows a tree's verify reads; 0 (default): a draft model's chains",
    )
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
    row_modes = ROWS if args.rows == "both" else (args.rows,)
    if args.tree:
        row_modes = ("whole",)  # a tree's verify reads whole rows
    print(
        f"median of {args.repeats} generations of {args.tokens} tokens; rounds only: "
        "the prefill and the prompt pass's token excluded. µs a round, and where it goes: "
        "each step's cost beside the loop times its count in a round; python the rest"
    )
    print(
        f"{'vocab':>7} {'context':>7} {'sampling':>8} {'γ':>2} {'rows':>6} {'µs/round':>9} "
        f"{'µs/token':>9} {'tokens/s':>9} {'accepted/s':>10} | {'copy':>5} {'scan':>5} "
        f"{'chain':>5} {'accept':>6} {'python':>6}"
    )
    for n_vocab in vocabs:
        table = logit_table(n_vocab)
        for context in contexts:
            for name, params in SAMPLINGS.items():
                for gamma in GAMMAS:
                    for rows in row_modes:
                        on_device = rows == "device"
                        r = median_run(
                            args.repeats,
                            table,
                            context,
                            gamma,
                            params,
                            args.tokens,
                            on_device,
                            args.tree,
                        )
                        b = breakdown(table, params, r, on_device)
                        print(
                            f"{n_vocab:>7} {context:>7} {name:>8} {gamma:>2} {rows:>6} "
                            f"{r.us_round:>9.0f} {r.us_token:>9.0f} {r.tokens_s:>9.0f} "
                            f"{r.accepted_s:>10.0f} | {b.copy:>5.0f} {b.scan:>5.0f} "
                            f"{b.chain:>5.0f} {b.accept:>6.0f} {b.python:>6.0f}",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
