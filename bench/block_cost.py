"""A block draft's cost per pass beside its target's per verify pass, at several block lengths.

A DFlash (or DSpark) draft drafts a whole block in one pass, so what decides its worth is
the pass's cost against the verify pass that checks the block. Without --target and --draft,
bench/gpu/synthetic.py writes a pair of --shape (their shapes and storage types, random
weights: the costs are real, the drafts are not): `tiny` (a 256-wide, 4-layer F16 target
and a one-layer DFlash draft, seconds) or `mini` (a 1024-wide, 16-layer Q4_K_M target of
0.14 GiB and a DFlash draft shaped as z-lab's Qwen3-8B-DFlash-b16 scaled down: 5 target
layers, 5 decoder layers, blocks of 16, F16, 0.12 GiB). At a context of --context tokens,
every sample after rolling back to it, the samples taking turns, for each γ:

- target token: one position decoded, on the target as a round runs it (keeping the layer
  inputs the draft reads);
- target verify γ+1: the γ+1 positions a round's verify decodes;
- block pass γ: the draft's one pass over [anchor, γ masks] (anchor-first DSpark: γ rows);
- take in 1, take in γ+1: the target's rows of the positions a round commits, projected
  into the draft's cache (1 when nothing was accepted, γ+1 when everything was).

Then specrun's round loop at the fixed γ (greedy, --tokens after the same context as its
prompt): the median draft and verify seconds of a round, as its Round events report them.

    .venv/bin/python -m bench.block_cost [--shape tiny|mini] [--gammas 1,3,7,15] [--repeat 9]
    .venv/bin/python -m bench.block_cost --target T.gguf --draft DFLASH.gguf
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.head_cost import Sample, decode_timer, interleaved
from specrun.core.blocks import BlockDraft
from specrun.core.gamma import FixedGamma
from specrun.core.heads import HiddenRows
from specrun.core.loop import Round, generate
from specrun.core.sampling import SamplingParams
from specrun.llama.blocks import NativeBlock, open_block
from specrun.llama.model import Model

SYNTHETIC = Path(__file__).resolve().parent / "gpu" / "synthetic.py"
PROMPT = "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12"
PAIRS = {  # --shape: (synthetic shape, target type, draft's decoder layers)
    "tiny": ("tiny-target", "f16", 1),
    "mini": ("mini-target", "q4_k_m", 5),
}


def write_pair(shape: str) -> tuple[str, str]:
    """A synthetic target of `shape` and a DFlash draft for it, in a scratch folder."""
    name, kind, layers = PAIRS[shape]
    scratch = Path(tempfile.mkdtemp(prefix="block-cost-"))
    target, draft = scratch / f"{name}-{kind}.gguf", scratch / f"{name}-dflash-f16.gguf"
    for out, extra in [(target, [kind]), (draft, ["f16", "--block", "dflash"])]:
        layer_flags = ["--block-layers", str(layers)] if out == draft else []
        subprocess.run(
            [sys.executable, str(SYNTHETIC), name, extra[0], str(out), *extra[1:], *layer_flags],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return str(target), str(draft)


@dataclass(frozen=True)
class BlockTimers:
    draft: Sample  # the pass over [anchor, γ masks]
    take_in_one: Sample  # the rows of the one position a round with nothing accepted commits
    take_in_all: Sample  # the rows of the γ+1 a round with everything accepted commits


def block_timers(
    block: NativeBlock, rows: HiddenRows, target: Model, context: list[int], gamma: int
) -> BlockTimers:
    """The draft's pass over a block of γ drafts at the end of `context`, and its taking in
    of 1 and of γ+1 committed positions' rows, each after rolling its cache back."""
    anchor = len(context) - 1  # the last committed token: the target has not decoded it
    target.reset()  # decoded afresh, so the target keeps the rows of the whole context
    target.logits(context[:anchor], 0)
    states = rows.rows(0, anchor).copy()
    block.truncate(0)
    block.inject(0, states)

    def draft() -> float:
        start = time.perf_counter()
        block.draft(anchor, context[anchor], gamma)
        return time.perf_counter() - start

    def take_in(count: int) -> Sample:
        def sample() -> float:
            block.truncate(anchor - count)
            start = time.perf_counter()
            block.inject(anchor - count, states[anchor - count :])
            return time.perf_counter() - start

        return sample

    return BlockTimers(draft, take_in(1), take_in(gamma + 1))


def loop_round(
    target: Model, source: BlockDraft, prompt: list[int], gamma: int, tokens: int
) -> tuple[float, float]:
    """The median draft and verify seconds of a round in specrun's loop at a fixed γ."""
    drafts, verifies = [], []
    for event in generate(
        target,
        prompt,
        draft=source,
        params=SamplingParams(temperature=0.0),
        policy=FixedGamma(gamma),
        max_tokens=tokens,
    ):
        if isinstance(event, Round) and not event.prompt_pass and event.drafted:
            drafts.append(event.draft_seconds)
            verifies.append(event.verify_seconds)
    assert drafts, "no round drafted"
    return statistics.median(drafts), statistics.median(verifies)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", help="the target GGUF (default: written, see --shape)")
    parser.add_argument("--draft", help="a DFlash or DSpark draft for it (default: written)")
    parser.add_argument("--shape", choices=PAIRS, default="tiny", help="the pair written (tiny)")
    parser.add_argument("--gammas", default="1,3,7,15", help="block lengths drafted (1,3,7,15)")
    parser.add_argument("--context", type=int, default=512, help="tokens in the caches (512)")
    parser.add_argument("--repeat", type=int, default=9, help="samples of each; median (9)")
    parser.add_argument("--tokens", type=int, default=48, help="tokens a loop generation (48)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every model (2)")
    args = parser.parse_args()
    if bool(args.target) != bool(args.draft):
        parser.error("--target and --draft go together (or neither: a pair is written)")
    gammas = [int(g) for g in args.gammas.split(",")]
    if not (args.target and args.draft):
        args.target, args.draft = write_pair(args.shape)

    target = Model(args.target, n_ctx=args.context + 2 * args.tokens + 64, threads=args.threads)
    block, rows = open_block(args.draft, target)
    gammas = [g for g in gammas if 0 < g <= block.longest]
    prompt = target.tokenize(PROMPT)
    context = (prompt * (args.context // len(prompt) + 1))[: args.context]
    print(
        f"{Path(args.target).name} (target), {Path(args.draft).name} ({block.kind}, block of "
        f"{block.block_size}, {block.longest} drafts at most); {args.threads} threads, context "
        f"{args.context}, median of {args.repeat} (range), ms"
    )
    for gamma in gammas:
        timers = {
            "target token": decode_timer(target, context, 1),
            f"target verify {gamma + 1}": decode_timer(target, context, gamma + 1),
        }
        block_samples = block_timers(block, rows, target, context, gamma)
        timers |= {
            f"block pass γ={gamma}": block_samples.draft,
            "take in 1": block_samples.take_in_one,
            f"take in {gamma + 1}": block_samples.take_in_all,
        }
        times = interleaved(timers, args.repeat)
        token = statistics.median(times["target token"])
        verify = statistics.median(times[f"target verify {gamma + 1}"])
        print(f"\nγ = {gamma}:")
        for name, samples in times.items():
            print(line(name, samples, token, verify))
        source = BlockDraft(block, rows, target.n_vocab)
        loop = [loop_round(target, source, context, gamma, args.tokens) for _ in range(3)]
        drafted, verified = (statistics.median(part) for part in zip(*loop))
        print(
            f"  in the loop (median round of 3 generations): draft {1e3 * drafted:.3f} ms, "
            f"verify {1e3 * verified:.3f} ms, draft/verify {drafted / verified:.2f}"
        )
    block.close()
    target.close()


def line(name: str, samples: list[float], token: float, verify: float | None = None) -> str:
    median = statistics.median(samples)
    low, high = 1e3 * min(samples), 1e3 * max(samples)
    against = "" if verify is None else f"  {median / verify:5.2f}x verify"
    return (
        f"  {name:22} {1e3 * median:8.3f} ms  {median / token:5.2f}x token{against}  "
        f"({low:.3f}-{high:.3f})"
    )


if __name__ == "__main__":
    main()
