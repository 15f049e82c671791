"""A draft's cost per token beside its target's, in one process, the samples taking turns.

The drafts of the demo target (SmolLM2-135M F16): the demo pair's Q4_0 draft model, an
EAGLE-3 head, and the MTP layer of the target's glm4moe twin. Without --head and
--mtp-target, bench/gpu/synthetic.py writes both from the target (its shape and tokenizer,
random F16 weights: the costs are real, the drafts are not). Each is timed as a round uses
it, at a context of --context tokens, every sample after rolling back to it:

- target token: one position decoded (plain decoding), and a verify of γ+1 positions;
- the same on a target that keeps a head's hidden rows (an EAGLE-3 head's three layer
  inputs, or the last state an MTP layer reads): every position then runs through the last
  layer, and the rows are copied out;
- draft model token: one position;
- a head's first draft of a round: the newly committed pair taken in (for EAGLE-3 through
  its `fc` encoder first) and decoded; its next drafts: its own state fed back.

Then specrun's round loop at the fixed γ (greedy, --tokens a generation after the same
context as its prompt), the samples again taking turns: the draft seconds per drafted token
that specrun's Stats report, which add the sampling and the loop's own work per token to
the decode.

    .venv/bin/python bench/head_cost.py [--repeat 9] [--context 512] [--gamma 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specrun.core.drafting import DraftSource, ModelDraft
from specrun.core.gamma import FixedGamma
from specrun.core.heads import HeadDraft, HiddenRows
from specrun.core.loop import generate
from specrun.core.sampling import SamplingParams
from specrun.core.stats import Stats
from specrun.llama.heads import NativeHead, open_eagle3, open_mtp
from specrun.llama.model import Model

SYNTHETIC = Path(__file__).resolve().parent / "gpu" / "synthetic.py"
PROMPT = "The history of the printing press begins in the fifteenth century, when"
Sample = Callable[[], float]  # one timed call, seconds


def decode_timer(model: Model, context: list[int], width: int) -> Sample:
    """A decode of `width` positions after `context`, as a round's call makes it."""
    extension = context + context[-width:]

    def sample() -> float:
        model.logits(context, 0)
        start = time.perf_counter()
        model.logits(extension, width, view=True)
        return time.perf_counter() - start

    return sample


def head_timers(
    head: NativeHead, rows: HiddenRows, target: Model, context: list[int]
) -> tuple[Sample, Sample]:
    """A head's first draft of a round and its next, over the pairs of `context` (the
    target's rows of it, as a verify leaves them)."""
    n = len(context)
    target.logits(context, 0)
    states = rows.rows(n - 2, n).copy()  # the rows of the last two positions
    head.truncate(0)
    head.feed(head.offset, context[1 : n - 1], rows.rows(0, n - 2), own=False, output=False)
    first_at, token = n - 2 + head.offset, context[-1]  # the newly committed pair

    def first() -> float:
        head.truncate(first_at)
        start = time.perf_counter()
        head.feed(first_at, [token], states[:1], own=False, output=True)
        return time.perf_counter() - start

    def following() -> float:
        head.truncate(first_at)
        fed = head.feed(first_at, [token], states[:1], own=False, output=True)
        assert fed is not None
        state = fed[1].copy()
        start = time.perf_counter()
        head.feed(first_at + 1, [token], state[None], own=True, output=True)
        return time.perf_counter() - start

    return first, following


def in_loop_draft_cost(
    target: Model, source: DraftSource, prompt: list[int], gamma: int, tokens: int
) -> float:
    """Seconds per drafted token in specrun's round loop at a fixed γ (Stats' figure)."""
    stats = Stats()
    for event in generate(
        target,
        prompt,
        draft=source,
        params=SamplingParams(temperature=0.0),
        policy=FixedGamma(gamma),
        max_tokens=tokens,
    ):
        stats.add(event)
    assert stats.costs.t_draft is not None, "no round drafted"
    return stats.costs.t_draft


def interleaved(samples: dict[str, Sample], repeat: int) -> dict[str, list[float]]:
    """Each sample `repeat` times, taking turns, after one untimed call of each (buffers)."""
    for sample in samples.values():
        sample()
    times: dict[str, list[float]] = {name: [] for name in samples}
    for _ in range(repeat):
        for name, sample in samples.items():
            times[name].append(sample())
    return times


def write_heads(target: str, head: str | None, mtp: str | None) -> tuple[str, str]:
    """The head and the MTP target given, or written from `target` into a scratch folder."""
    scratch = Path(tempfile.mkdtemp(prefix="head-cost-"))
    for flags, given in [(["--head", "eagle3"], head), (["--mtp"], mtp)]:
        if given:
            continue
        out = scratch / f"{Path(target).stem}-{flags[-1].lstrip('-')}.gguf"
        subprocess.run(
            [sys.executable, str(SYNTHETIC), target, "f16", str(out), *flags],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        head, mtp = (str(out), mtp) if flags[0] == "--head" else (head, str(out))
    assert head and mtp
    return head, mtp


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", help="the target GGUF (default: the demo pair's)")
    parser.add_argument("--draft", help="the draft GGUF (default: the demo pair's)")
    parser.add_argument("--head", help="an EAGLE-3 head for the target (default: written)")
    parser.add_argument("--mtp-target", help="a target with an MTP layer (default: written)")
    parser.add_argument("--context", type=int, default=512, help="tokens in the caches (512)")
    parser.add_argument("--gamma", type=int, default=3, help="the verify's γ, the loop's (3)")
    parser.add_argument("--repeat", type=int, default=9, help="samples of each; median (9)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens a loop generation (64)")
    parser.add_argument("--threads", type=int, default=2, help="threads of every model (2)")
    args = parser.parse_args()
    if not (args.target and args.draft):
        from specrun.models.demo import prepare_demo_pair

        pair = prepare_demo_pair()
        args.target, args.draft = args.target or str(pair[0]), args.draft or str(pair[1])
    args.head, args.mtp_target = write_heads(args.target, args.head, args.mtp_target)

    n_ctx = args.context + 2 * args.tokens + 64

    def load(path: str, load_mtp: bool = False) -> Model:
        return Model(path, n_ctx=n_ctx, threads=args.threads, load_mtp=load_mtp)

    target, draft = load(args.target), load(args.draft)
    eagle_target, mtp_plain = load(args.target), load(args.mtp_target)
    mtp_target = load(args.mtp_target, load_mtp=True)
    eagle, eagle_rows = open_eagle3(args.head, eagle_target)
    mtp, mtp_rows = open_mtp(mtp_target)
    prompt = target.tokenize(PROMPT)
    context = (prompt * (args.context // len(prompt) + 1))[: args.context]
    width = args.gamma + 1
    eagle_first, eagle_next = head_timers(eagle, eagle_rows, eagle_target, context)
    mtp_first, mtp_next = head_timers(mtp, mtp_rows, mtp_target, context)
    timers = {
        "target token": decode_timer(target, context, 1),
        f"target verify {width}": decode_timer(target, context, width),
        "target token, EAGLE-3 rows kept": decode_timer(eagle_target, context, 1),
        f"target verify {width}, EAGLE-3 rows kept": decode_timer(eagle_target, context, width),
        "draft model token": decode_timer(draft, context, 1),
        "EAGLE-3 head, a round's first draft": eagle_first,
        "EAGLE-3 head, next draft": eagle_next,
        "MTP target token": decode_timer(mtp_plain, context, 1),
        "MTP target token, MTP rows kept": decode_timer(mtp_target, context, 1),
        f"MTP target verify {width}, MTP rows kept": decode_timer(mtp_target, context, width),
        "MTP layer, a round's first draft": mtp_first,
        "MTP layer, next draft": mtp_next,
    }
    times = interleaved(timers, args.repeat)
    loop_runs = {
        "draft model": (target, ModelDraft(draft, target.n_vocab)),
        "EAGLE-3 head": (eagle_target, HeadDraft(eagle, eagle_rows, eagle_target.n_vocab)),
        "MTP layer": (mtp_target, HeadDraft(mtp, mtp_rows, mtp_target.n_vocab)),
    }
    loop = interleaved(
        {
            name: lambda model=model, source=source: in_loop_draft_cost(
                model, source, context, args.gamma, args.tokens
            )
            for name, (model, source) in loop_runs.items()
        },
        args.repeat,
    )
    print(
        f"{Path(args.target).name} (target), {Path(args.draft).name} (draft model), "
        f"{Path(args.head).name} (EAGLE-3 head), {Path(args.mtp_target).name} (MTP target); "
        f"{args.threads} threads, context {args.context}, median of {args.repeat} (range), ms"
    )
    plain = statistics.median(times["target token"])
    for name, samples in times.items():
        print(line(name, samples, plain))
    print(f"\nIn the round loop at γ = {args.gamma}, per drafted token (Stats.costs.t_draft):")
    for name, samples in loop.items():
        print(line(name, samples, plain))
    for model in (target, draft, eagle_target, mtp_plain, mtp_target):
        model.close()


def line(name: str, samples: list[float], plain: float) -> str:
    median = statistics.median(samples)
    low, high = 1e3 * min(samples), 1e3 * max(samples)
    return (
        f"  {name:42} {1e3 * median:7.3f} ms  {median / plain:5.2f}x target token  "
        f"({low:.3f}-{high:.3f})"
    )


if __name__ == "__main__":
    main()
