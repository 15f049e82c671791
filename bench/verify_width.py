"""What a verify of w positions costs beside one decoded token, per target file: the price of
γ on this machine, and with it the acceptance a draft needs before speculation pays.

    .venv/bin/python bench/verify_width.py --threads 2 TARGET.gguf [TARGET.gguf ...]

Each width is timed as a round's call makes it (head_cost.decode_timer, after rolling back
to a --context-token text), the files' samples taking turns.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.head_cost import PROMPT, decode_timer, interleaved  # noqa: E402
from specrun.llama.model import Model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("targets", nargs="+")
    parser.add_argument("--widths", default="1,2,3,4,5,7,9")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    models = {
        Path(t).name: Model(t, n_ctx=args.context + 16, threads=args.threads) for t in args.targets
    }
    samples = {}
    for name, model in models.items():
        text = model.tokenize(PROMPT * 64, add_special=True)[: args.context]
        for width in widths:
            samples[name, width] = decode_timer(model, text, width)
    times = interleaved({f"{n} {w}": s for (n, w), s in samples.items()}, args.repeat)
    print(
        f"median of {args.repeat}, {args.threads} threads, after {args.context} tokens of context"
    )
    for name in models:
        one = statistics.median(times[f"{name} 1"])
        cells = [
            f"w={w}: {statistics.median(times[f'{name} {w}']) * 1e3:6.1f} ms "
            f"{statistics.median(times[f'{name} {w}']) / one:4.2f}x"
            for w in widths
        ]
        print(f"{name:28} " + "  ".join(cells))


if __name__ == "__main__":
    main()
