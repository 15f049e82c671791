"""What the AMX guard costs: one GGUF loaded as llama.cpp likes (extra buffer types: REPACK,
and AMX where built) and as the guard loads it on an AMX build (extra buffer types off, REPACK by
tensor overrides), and with the extra types off alone, measured interleaved in one process.

    .venv/bin/python bench/cpu_layouts.py [MODEL.gguf] [--repeat 5] [--threads N]

Default model: the demo pair's Q4_0 draft. Rates: one-token decode (a draft step or
plain decoding), a 4-token verify, and a 256-token prompt.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from specrun.llama import model as llama_model
from specrun.llama import params as llama_params
from specrun.llama.devices import build_info, repack_buffer_type
from specrun.models.demo import prepare_demo_pair

PROMPT = (
    "Write a short story about a robot who learns to paint, and what the paint teaches it. " * 12
)


def load(path: str, threads: int | None, how: str) -> llama_model.Model:
    """ "default": as llama.cpp likes; "guard": as on an AMX build; "off": extra types off alone."""
    build = build_info()
    if how != "default":  # what load_params does on a build whose CPU has the AMX buffer type
        llama_model.build_info = lambda: replace(
            build, extra_buffer_types=("AMX",) + build.extra_buffer_types
        )
    if how == "off":
        llama_params.repack_buffer_type = lambda: None
    try:
        return llama_model.Model(path, n_ctx=1024, threads=threads)
    finally:
        llama_model.build_info, llama_params.repack_buffer_type = build_info, repack_buffer_type


def measure(model: llama_model.Model, prompt: list[int]) -> dict[str, float]:
    model.reset()
    start = time.perf_counter()
    model.logits(prompt, 1)
    prefill = len(prompt) / (time.perf_counter() - start)
    seq = list(prompt)
    start = time.perf_counter()
    for _ in range(32):
        seq.append(int(model.logits(seq, 1)[-1].argmax()))
    decode = 32 / (time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(8):
        model.logits(seq[: len(seq) - 4 - i], 1)  # roll back, then verify 4 new positions
        model.logits(seq[: len(seq) - i], 4)
    verify = 8 / (time.perf_counter() - start)
    return {"decode tok/s": decode, "verify(4)/s": verify, "prompt tok/s": prefill}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="GGUF file (default: the demo Q4_0 draft)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="interleaved measurements of each load; their median is shown (5)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="llama.cpp's threads (default: its own)"
    )
    args = parser.parse_args()
    path = args.model or str(prepare_demo_pair()[1])
    build = build_info()
    models = {
        "default (" + " ".join(build.extra_buffer_types or ("none",)) + ")": load(
            path, args.threads, "default"
        ),
        "guard (REPACK by override)": load(path, args.threads, "guard"),
        "extra types off alone": load(path, args.threads, "off"),
    }
    prompt = next(iter(models.values())).tokenize(PROMPT)[:256]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in models}
    for _ in range(args.repeat):
        for name, model in models.items():
            results[name].append(measure(model, prompt))
    print(
        f"{path}, llama-cpp-python {build.version}, CPU features {' '.join(build.cpu_features)}, "
        f"median of {args.repeat}"
    )
    columns = list(next(iter(results.values()))[0])
    print(f"{'load':<28}" + "".join(f"{c:>15}" for c in columns))
    for name, runs in results.items():
        print(
            f"{name:<28}"
            + "".join(f"{statistics.median(r[c] for r in runs):>15.1f}" for c in columns)
        )
    for model in models.values():
        model.close()


if __name__ == "__main__":
    main()
