"""The kit's measurements: costs, specrun beside native llama.cpp, and the predicted speedup.

For each target, with the draft beside it, in one process:
- the target's time per verify width 1..16 and the draft's time per token
  (specrun.bench.measure_costs: each call rolls back to the same context first);
- greedy generation through specrun at γ = 0 and at a fixed γ (no confidence cut-off),
  with the loop's own time per round, and the draft's time per token inside the loop;
- the native peers on the same files and prompt: `llama-completion` (plain) and
  `llama-speculative-simple` at the same fixed γ;
- what `auto` would choose and gain for α = 0.5..0.9: the cost model's expected rate
  (specrun.core.costs.expected_rate) over the measured costs. Random weights make acceptance
  meaningless, so α comes from real pairs measured elsewhere, and says where from.

Results are written after every target (JSON and Markdown), so a run cut short by its
time limit still leaves what it measured.

    python bench/gpu/measure.py --draft D.gguf --target NAME=T.gguf [--target ...] --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from specrun.bench import CostCurve, measure_costs
from specrun.core.drafting import ModelDraft
from specrun.core.gamma import GAMMA_MAX, FixedGamma
from specrun.core.loop import Round, generate
from specrun.core.sampling import SamplingParams, compiled
from specrun.core.stats import Stats
from specrun.llama.devices import accelerator_name, build_info
from specrun.llama.model import Model

ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)
# where acceptance rates of real pairs come from; the measured one is read at run time
ALPHA_SOURCES = [
    (
        "Leviathan et al. 2023 (Table 3) report α from about 0.5 to 0.9 "
        "across their target/draft pairs"
    ),
]
DEMO_RESULTS = Path(__file__).resolve().parents[1] / "results" / "demo.txt"
GREEDY = SamplingParams(temperature=0.0)


def measured_alpha() -> str | None:
    """The demo pair's α on the CPU, from the committed `specrun bench` results."""
    try:
        match = re.search(
            r"α = ([0-9.]+) \(fixed-γ runs\)", DEMO_RESULTS.read_text(encoding="utf-8")
        )
    except OSError:
        return None
    return (
        f"SmolLM2-135M F16 target / Q4_0 draft on the CPU: α = {match.group(1)} "
        f"({DEMO_RESULTS.name})"
        if match
        else None
    )


def machine() -> dict[str, str]:
    """The GPU and driver (nvidia-smi), else the CPU; and what the llama.cpp build compiled in."""
    info = {
        "host": platform.node(),
        "python": platform.python_version(),
        "device": accelerator_name(),
    }
    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,compute_cap",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        name, driver, memory, capability = (
            part.strip() for part in smi.stdout.splitlines()[0].split(",")
        )
        info |= {
            "gpu": name,
            "driver": driver,
            "gpu_memory": memory,
            "compute_capability": capability,
        }
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        cpu = next(
            (
                line.partition(":")[2].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        info |= {"gpu": "none", "cpu": cpu, "cores": str(os.cpu_count())}
    info["backends"] = ", ".join(build_info().backends)
    info["sampling"] = "compiled" if compiled() else "numpy"
    return info


def prompt_text(words: int) -> str:
    return " ".join(f"w{i}" for i in range(1, words + 1))


@dataclass
class Generation:
    tokens_per_second: float
    generated: int
    acceptance: float | None
    overhead_ms_per_round: float
    draft_ms_per_token: float | None  # inside the loop: the decode plus the loop's per-token work


def specrun_generation(
    target: Model, prompt: list[int], draft: Model | None, gamma: int, tokens: int
) -> Generation:
    source = ModelDraft(draft, target.n_vocab, p_min=0.0) if draft is not None and gamma else None
    stats = Stats()
    overheads: list[float] = []
    for event in generate(
        target, prompt, draft=source, params=GREEDY, policy=FixedGamma(gamma), max_tokens=tokens
    ):
        stats.add(event)
        if isinstance(event, Round):
            overheads.append(event.overhead_seconds)
    return Generation(
        tokens_per_second=stats.tokens_per_second or 0.0,
        generated=stats.generated,
        acceptance=stats.accepted / stats.drafted if stats.drafted else None,
        overhead_ms_per_round=1e3 * statistics.median(overheads),
        draft_ms_per_token=1e3 * stats.costs.t_draft if stats.costs.t_draft is not None else None,
    )


def native(binary: Path, args: list[str], rate: str) -> tuple[float, str]:
    """Run a native peer; return the rate its log reports (pattern `rate`) and the log.
    llama.cpp logs from a worker thread, and on a busy machine the last lines are
    sometimes lost at exit: such a run is repeated, up to three times."""
    for _ in range(3):
        done = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, errors="replace", timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{binary.name} exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
            )
        log = done.stdout + done.stderr
        if found := re.findall(rate, log):
            return float(found[-1]), log
    raise RuntimeError(f"{binary.name} logged no rate in three runs")


def native_plain(
    bin_dir: Path, target: Path, prompt: str, tokens: int, gpu_layers: int
) -> dict[str, float]:
    rate, _ = native(
        bin_dir / "llama-completion",
        [
            "-m",
            str(target),
            "-p",
            prompt,
            "-n",
            str(tokens),
            "--temp",
            "0",
            "-ngl",
            str(gpu_layers),
            "--ignore-eos",
            "-no-cnv",
        ],
        r" eval time = .*?runs .*?([0-9.]+) tokens per second",
    )
    return {"tokens_per_second": rate}


def native_speculative(
    bin_dir: Path, target: Path, draft: Path, prompt: str, tokens: int, gamma: int, gpu_layers: int
) -> dict[str, float]:
    rate, log = native(
        bin_dir / "llama-speculative-simple",
        [
            "-m",
            str(target),
            "-md",
            str(draft),
            "-p",
            prompt,
            "-n",
            str(tokens),
            "--temp",
            "0",
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            str(gamma),
            "--spec-draft-n-min",
            str(gamma),
            "--spec-draft-p-min",
            "0",
            "-ngl",
            str(gpu_layers),
            "-ngld",
            str(gpu_layers),
            "--ignore-eos",
        ],
        r"decoded +\d+ tokens in .*speed: *([0-9.]+) t/s",
    )
    accept = re.findall(r"accept += *([0-9.]+)%", log)
    return {
        "tokens_per_second": rate,
        "acceptance": float(accept[-1]) / 100 if accept else float("nan"),
    }


def prediction(curve: CostCurve) -> list[dict[str, float]]:
    rows = []
    for alpha in ALPHAS:
        best, rates = curve.predicted_best(alpha, min(GAMMA_MAX, len(curve.verify_by_width) - 1))
        rows.append(
            {
                "alpha": alpha,
                "gamma": best,
                "tokens_per_second": rates[best],
                "speedup": rates[best] / rates[0],
            }
        )
    return rows


def measure_target(
    name: str, path: Path, draft: Model, args: argparse.Namespace
) -> dict[str, object]:
    started = time.perf_counter()
    target = Model(path, n_ctx=args.n_ctx, gpu_layers=args.gpu_layers)
    loaded = time.perf_counter() - started
    try:
        prompt = prompt_text(args.prompt_words)
        prompt_tokens = target.tokenize(prompt)
        context = (prompt_tokens * (args.context // len(prompt_tokens) + 1))[: args.context]
        target.logits(
            context + context[: args.widths], args.widths
        )  # untimed: the first calls set up buffers
        draft_raw, verify = measure_costs(target, draft, context, args.widths)
        plain = specrun_generation(target, prompt_tokens, None, 0, args.tokens)
        fixed = specrun_generation(target, prompt_tokens, draft, args.gamma, args.tokens)
        assert draft_raw is not None
        curve = CostCurve(
            fixed.draft_ms_per_token / 1e3 if fixed.draft_ms_per_token else draft_raw,
            verify,
            plain.overhead_ms_per_round / 1e3,
        )
        result: dict[str, object] = {
            "file": path.name,
            "size_gib": path.stat().st_size / 2**30,
            "load_seconds": loaded,
            "prompt_tokens": len(prompt_tokens),
            "context": len(context),
            "gamma": args.gamma,
            "verify_ms_by_width": {w: 1e3 * s for w, s in verify.items()},
            "draft_ms_per_token": 1e3 * draft_raw,
            "specrun_plain": plain.__dict__,
            "specrun_fixed": fixed.__dict__,
            "prediction": prediction(curve),
        }
    finally:
        target.close()
    if args.native:  # after specrun has let go of the GPU memory
        gpu_layers = 999 if args.gpu_layers is None else args.gpu_layers
        for key, run in [
            (
                "native_plain",
                lambda: native_plain(args.native, path, prompt, args.tokens, gpu_layers),
            ),
            (
                "native_speculative",
                lambda: native_speculative(
                    args.native, path, args.draft, prompt, args.tokens, args.gamma, gpu_layers
                ),
            ),
        ]:
            try:
                result[key] = run()
            except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                result[key] = {"error": str(error)}
    return result


def render(results: dict) -> str:
    m = results["machine"]
    where = (
        f"{m['gpu']}, driver {m['driver']}"
        if m["gpu"] != "none"
        else f"CPU only: {m['cpu']}, {m['cores']} cores"
    )
    lines = [
        f"# specrun GPU kit: {where}",
        "",
        f"{results['date']}; llama.cpp backends: {m['backends']}; build: {results['build']}.",
        "",
    ]
    lines += [
        "α for the prediction, from real pairs: " + "; ".join(results["alpha_sources"]) + ".",
        "",
    ]
    for name, r in results["targets"].items():
        if "skipped" in r:
            lines += [f"## {name}: skipped ({r['skipped']})", ""]
            continue
        fixed, plain, g = r["specrun_fixed"], r["specrun_plain"], r["gamma"]
        written = (
            ""
            if r.get("models_seconds") is None
            else f"models written in {r['models_seconds']:.0f} s, "
        )
        lines += [
            f"## {name} ({r['file']}, {r['size_gib']:.2f} GiB, "
            f"{written}loaded in {r['load_seconds']:.1f} s) "
            f"with draft {results['draft']}",
            "",
        ]
        widths = r["verify_ms_by_width"]
        lines += [
            "| verify width | " + " | ".join(str(w) for w in widths) + " |",
            "|---" * (len(widths) + 1) + "|",
            "| ms | " + " | ".join(f"{ms:.2f}" for ms in widths.values()) + " |",
            "",
        ]
        lines += [
            f"- draft: {r['draft_ms_per_token']:.2f} ms a token decoded alone, "
            f"{fixed['draft_ms_per_token']:.2f} ms a token inside the loop (γ={g}).",
            f"- loop overhead per round: {plain['overhead_ms_per_round']:.3f} ms at γ=0, "
            f"{fixed['overhead_ms_per_round']:.3f} ms at γ={g}.",
            "",
        ]
        lines += ["| configuration | tok/s | acceptance |", "|---|---|---|"]
        for label, row in [
            ("native llama-completion", r.get("native_plain")),
            ("specrun γ=0", plain),
            (f"native llama-speculative-simple γ={g}", r.get("native_speculative")),
            (f"specrun γ={g}", fixed),
        ]:
            if row is None:
                lines.append(f"| {label} | not run | |")
            elif "error" in row:
                lines.append(f"| {label} | failed: {row['error']} | |")
            else:
                acceptance = row.get("acceptance")
                shown = (
                    "-" if acceptance is None or acceptance != acceptance else f"{acceptance:.0%}"
                )
                lines.append(f"| {label} | {row['tokens_per_second']:.1f} | {shown} |")
        lines += [
            "",
            "Predicted with these costs (acceptance is random here, so α is given):",
            "",
            "| α | γ auto picks | tok/s | speedup over plain |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p['alpha']:.1f} | {p['gamma']} | {p['tokens_per_second']:.1f} "
            f"| {p['speedup']:.2f}× |"
            for p in r["prediction"]
        ]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", type=Path, required=True, help="the draft GGUF")
    parser.add_argument(
        "--target", action="append", required=True, help="NAME=PATH; measured in this order"
    )
    parser.add_argument(
        "--native", type=Path, help="folder with llama-completion and llama-speculative-simple"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for results.json and results.md"
    )
    parser.add_argument(
        "--tokens", type=int, default=128, help="tokens each generation makes (128)"
    )
    parser.add_argument(
        "--gamma", type=int, default=4, help="the fixed γ of specrun and the native peer (4)"
    )
    parser.add_argument(
        "--widths", type=int, default=16, help="verify widths timed: 1 to this (16)"
    )
    parser.add_argument(
        "--context", type=int, default=512, help="tokens in the cache while costs are timed (512)"
    )
    parser.add_argument(
        "--prompt-words", type=int, default=40, help="words of the generations' prompt (40)"
    )
    parser.add_argument("--n-ctx", type=int, default=4096, help="context of each model (4096)")
    parser.add_argument("--gpu-layers", type=int, help="default: every layer llama.cpp can offload")
    parser.add_argument(
        "--deadline", type=float, default=float("inf"), help="Unix time; no target starts after it"
    )
    parser.add_argument("--build", default="-", help="how the build went, for the record")
    parser.add_argument(
        "--models-seconds", type=float, help="how long writing this call's models took"
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add to the results already in --out, skipping the targets measured there",
    )
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    stored = args.out / "results.json"
    results: dict = (
        json.loads(stored.read_text()) if args.append and stored.exists() else {"targets": {}}
    )
    results |= {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "build": args.build,
        "draft": args.draft.name,
        "alpha_sources": [s for s in [measured_alpha(), *ALPHA_SOURCES] if s],
    }
    draft = Model(args.draft, n_ctx=args.n_ctx, gpu_layers=args.gpu_layers)
    for spec in args.target:
        name, _, path = spec.partition("=")
        if "verify_ms_by_width" in results["targets"].get(name, {}):
            print(f"{name}: measured before, kept")
            continue
        if time.time() > args.deadline:
            results["targets"][name] = {"skipped": "out of time"}
        else:
            results["targets"][name] = measure_target(name, Path(path), draft, args)
            results["targets"][name]["models_seconds"] = args.models_seconds
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
        (args.out / "results.md").write_text(render(results))
        print(f"measured {name}", flush=True)
    draft.close()
    print(render(results))


if __name__ == "__main__":
    main()
