"""How fast `specrun heads train` fits an EAGLE-3 head: positions a second of its training
step (the unrolled loss, backward and AdamW), on random data of a target's shape.

    python bench/gpu/train_rate.py --shape 8b --out OUT     # Llama 3 8B's head, on CUDA
    python bench/gpu/train_rate.py --shape tiny --out OUT   # the kit's CPU mode

The shape is the head `specrun heads train` builds for that target: its width, heads and
FFN, a 32000-token draft vocabulary, the target's 128256 token embeddings frozen. A
position is one root of a window; each is unrolled `--unrolled` steps (4, the default of
`specrun heads train`). Appends a section to OUT/results.md and writes OUT/train-rate.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specrun.training.fit import Batch, pick_device, unrolled_loss  # noqa: E402
from specrun.training.gguf_io import HeadShape  # noqa: E402
from specrun.training.head import Eagle3Head  # noqa: E402

SHAPES = {  # (n_embd, n_head, n_head_kv, n_ff, n_vocab, draft_vocab, window, batch)
    "8b": (4096, 32, 8, 14336, 128256, 32000, 512, 4),
    "tiny": (64, 4, 4, 128, 342, 256, 64, 4),
}
TOP_K = 32


def random_batch(shape: tuple[int, ...], unrolled: int, rng: np.random.Generator) -> Batch:
    n_embd, _, _, _, n_vocab, draft_vocab, window, batch = shape
    span = window + unrolled + 1
    logits = rng.standard_normal((batch, span, TOP_K)).astype(np.float32)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return Batch(
        torch.from_numpy(rng.integers(0, n_vocab, (batch, span))),
        torch.from_numpy(rng.standard_normal((batch, window, 3 * n_embd)).astype(np.float16)),
        torch.from_numpy(rng.integers(-1, draft_vocab, (batch, span, TOP_K))),
        torch.from_numpy(probs),
        torch.full((batch,), span, dtype=torch.int64),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    parser.add_argument("--seconds", type=float, default=45.0, help="time measured (45)")
    parser.add_argument("--unrolled", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    n_embd, n_head, n_head_kv, n_ff, n_vocab, draft_vocab, window, batch = shape
    device = pick_device(args.device)
    head_shape = HeadShape(n_embd, n_head, n_head_kv, n_ff, (2, 16, 29), draft_vocab, 5e5, 1e-5)
    embeddings = torch.randn(n_vocab, n_embd) * 0.02
    head = Eagle3Head(head_shape, embeddings).to(device)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-4)
    data = [random_batch(shape, args.unrolled, np.random.default_rng(i)) for i in range(4)]

    def step(i: int) -> None:
        loss, _ = unrolled_loss(head, data[i % len(data)], args.unrolled, device)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for i in range(2):  # warm-up: kernels chosen, memory allocated
        step(i)
    sync()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        step(steps)
        steps += 1
        sync()
    seconds = time.perf_counter() - start
    rate = steps * window * batch / seconds
    memory = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    name = (
        torch.cuda.get_device_name()
        if device.type == "cuda"
        else f"CPU, {torch.get_num_threads()} threads"
    )
    record = {
        "shape": args.shape,
        "device": name,
        "unrolled": args.unrolled,
        "window": window,
        "batch": batch,
        "steps": steps,
        "seconds": seconds,
        "positions_per_second": rate,
        "max_memory_gib": memory,
        "torch": torch.__version__,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "train-rate.json").write_text(json.dumps(record, indent=2) + "\n")
    memory_note = f", peak memory {memory:.1f} GiB" if memory is not None else ""
    with open(args.out / "results.md", "a") as results:
        results.write(
            f"\n## EAGLE-3 head training ({args.shape} shape, {name})\n\n"
            f"{rate:,.0f} positions/s: {steps} steps of {batch} windows x {window} positions, "
            f"{args.unrolled} unrolled steps each, in {seconds:.0f} s{memory_note} (torch "
            f"{torch.__version__}, float32)\n"
        )
    print(f"train rate {args.shape}: {rate:,.0f} positions/s on {name}")


if __name__ == "__main__":
    main()
