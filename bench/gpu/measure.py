"""The kit's measurements: costs, specrun beside native llama.cpp, and the predicted speedup.

For each target, with the draft beside it, in one process:
- the target's time per verify width 1..16 and the draft's time per token (each call rolls
  back to the same context first);
- greedy generation through specrun at γ = 0 and at a fixed γ (no confidence cut-off),
  with the loop's own time per round, and the draft's time per token inside the loop;
- the loop's share of a round: its time but the models' decodes (synchronized), at γ = 0
  and with the draft model at the fixed γ, greedy and at T = 0.8, with backend sampling
  as `auto` chooses it (on where the output layer is on the GPU);
- with an EAGLE-3 head for the target (--head NAME=HEAD), the head's time per token (a
  round's first draft, which takes in the committed pair through its `fc` encoder, and the
  next ones) and specrun at the same fixed γ with the head; a target whose file has MTP
  layers (glm4moe: synthetic.py --mtp) is drafted by them instead of the draft model;
- with a block draft for the target (--block NAME=DFLASH: synthetic.py --block), its time
  per pass at every γ up to its block (or the widths timed), and specrun at the same fixed
  γ with it (`-d dflash:` as the CLI loads it: open_block, BlockDraft);
- the native peers on the same files and prompt: `llama-completion` (plain) and
  `llama-speculative-simple` at the same fixed γ (draft-simple, draft-eagle3, draft-mtp,
  draft-dflash or draft-dspark);
- what `auto` would choose and gain for α = 0.5..0.9: the cost model's expected rate
  (specrun.core.costs.expected_rate) over the measured costs. Random weights make acceptance
  meaningless, so α comes from real pairs measured elsewhere, and says where from.

Results are written after every target (JSON and Markdown), so a run cut short by its
time limit still leaves what it measured.

    python bench/gpu/measure.py --draft D.gguf --target NAME=T.gguf [--target ...] \
        [--head NAME=HEAD.gguf ...] [--block NAME=DFLASH.gguf ...] --out DIR
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as llama

from bench.block_cost import block_timers
from bench.head_cost import decode_timer, head_timers
from specrun.bench import CostCurve, measure_verify
from specrun.core.blocks import BlockDraft
from specrun.core.costs import expected_rate
from specrun.core.drafting import DraftSource, ModelDraft
from specrun.core.gamma import GAMMA_MAX, FixedGamma
from specrun.core.heads import HeadDraft
from specrun.core.loop import Round, generate
from specrun.core.sampling import SamplingParams, candidate_width, compiled
from specrun.core.stats import Stats
from specrun.llama.batch import Batch
from specrun.llama.blocks import open_block
from specrun.llama.devices import accelerator_name, build_info, gpu_devices
from specrun.llama.gguf import read_gguf_info
from specrun.llama.heads import MTP_ARCHITECTURES, open_eagle3, open_mtp
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
SAMPLED = SamplingParams(temperature=0.8, seed=0)  # llama.cpp's defaults otherwise


class TimedBatch(Batch):
    """A batch that adds up its decodes' time, each waited for (a GPU's decode returns before
    its work is done)."""

    native_seconds = 0.0

    def _decode(self) -> int:
        start = time.perf_counter()
        status = super()._decode()
        llama.llama_synchronize(self.context)
        self.native_seconds += time.perf_counter() - start
        return status


class TimedModel(Model):
    """A Model whose decodes are timed (`TimedBatch`): the models' time in a round, against
    which the loop's own is measured."""

    batch_type = TimedBatch

    @property
    def native_seconds(self) -> float:
        return self.batch.native_seconds if isinstance(self.batch, TimedBatch) else 0.0


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
        gpus = gpu_devices()  # no NVIDIA GPU: the build's own (Vulkan, Metal, ROCm), if any
        if gpus:
            info |= {
                "gpu": gpus[0].description,
                "driver": f"{gpus[0].backend} ({gpus[0].name})",
                "gpu_memory": f"{gpus[0].total_bytes >> 20} MiB",
            }
            return info | machine_build()
        cpu = next(
            (
                line.partition(":")[2].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        info |= {"gpu": "none", "cpu": cpu, "cores": str(os.cpu_count())}
    return info | machine_build()


def machine_build() -> dict[str, str]:
    """What the llama.cpp build compiled in, and whether specrun's sampling is compiled."""
    return {
        "backends": ", ".join(build_info().backends),
        "sampling": "compiled" if compiled() else "numpy",
    }


def prompt_text(words: int) -> str:
    return " ".join(f"w{i}" for i in range(1, words + 1))


@dataclass
class Generation:
    tokens_per_second: float
    generated: int
    acceptance: float | None
    overhead_ms_per_round: float
    draft_ms_per_token: float | None  # inside the loop: the decode plus the loop's per-token work
    # The round but its models' decodes (the target's and a draft model's; a head's decodes
    # count as the loop's, so none is given with a head): per round, and its share of a round.
    loop_ms_per_round: float | None = None
    loop_share: float | None = None


def specrun_generation(
    target: Model,
    prompt: list[int],
    source: DraftSource | None,
    gamma: int,
    tokens: int,
    params: SamplingParams = GREEDY,
) -> Generation:
    source = source if gamma else None
    timed = [m for m in (target, getattr(source, "model", None)) if isinstance(m, TimedModel)]
    stats = Stats()
    overheads: list[float] = []
    loops: list[float] = []
    rounds = 0.0
    native = sum(m.native_seconds for m in timed)
    for event in generate(
        target, prompt, draft=source, params=params, policy=FixedGamma(gamma), max_tokens=tokens
    ):
        stats.add(event)
        decoded = sum(m.native_seconds for m in timed) - native
        native += decoded
        if isinstance(event, Round) and not event.prompt_pass:
            overheads.append(event.overhead_seconds)
            loops.append(event.seconds - decoded)
            rounds += event.seconds
    measured_loop = timed and (source is None or isinstance(source, ModelDraft)) and loops
    return Generation(
        tokens_per_second=stats.tokens_per_second or 0.0,
        generated=stats.generated,
        acceptance=stats.accepted / stats.drafted if stats.drafted else None,
        overhead_ms_per_round=1e3 * statistics.median(overheads),
        draft_ms_per_token=1e3 * stats.costs.t_draft if stats.costs.t_draft is not None else None,
        loop_ms_per_round=1e3 * statistics.median(loops) if measured_loop else None,
        loop_share=sum(loops) / rounds if measured_loop and rounds else None,
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


def spec_args(kind: str, draft: Path | None, gpu_layers: int) -> list[str]:
    """llama-speculative-simple's drafting: draft-simple (a model), draft-eagle3 (a head),
    or draft-mtp (the target's own layers, no file)."""
    files = ["-md", str(draft), "-ngld", str(gpu_layers)] if draft is not None else []
    return [*files, "--spec-type", kind]


def native_speculative(
    bin_dir: Path,
    target: Path,
    spec: list[str],
    prompt: str,
    tokens: int,
    gamma: int,
    gpu_layers: int,
) -> dict[str, float]:
    rate, log = native(
        bin_dir / "llama-speculative-simple",
        [
            "-m",
            str(target),
            *spec,
            "-p",
            prompt,
            "-n",
            str(tokens),
            "--temp",
            "0",
            "--spec-draft-n-max",
            str(gamma),
            "--spec-draft-n-min",
            str(gamma),
            "--spec-draft-p-min",
            "0",
            "-ngl",
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
        rows.append(prediction_row(alpha, best, rates))
    return rows


def prediction_row(alpha: float, best: int, rates: dict[int, float]) -> dict[str, float]:
    """The best γ at α and its rate, against plain decoding's (γ 0)."""
    return {
        "alpha": alpha,
        "gamma": best,
        "tokens_per_second": rates[best],
        "speedup": rates[best] / rates[0],
    }


DRAFTS = {  # kind -> (as the report names it, llama-speculative-simple's --spec-type)
    "model": ("draft model", "draft-simple"),
    "eagle3": ("EAGLE-3 head", "draft-eagle3"),
    "mtp": ("MTP layer", "draft-mtp"),
    "dflash": ("DFlash draft", "draft-dflash"),
    "dspark": ("DSpark draft", "draft-dspark"),
}
BLOCK_KINDS = ("dflash", "dspark")


def median_of(sample: Callable[[], float], repeats: int = 5) -> float:
    sample()  # untimed: a first call sets up buffers
    return statistics.median(sample() for _ in range(repeats))


def drafted(
    file: str, per_token: float, generation: Generation, curve: CostCurve, first: float | None
) -> dict[str, object]:
    """One draft's figures: its time per token decoded alone (for a head, each draft after
    a round's first, and that first), and specrun at the fixed γ with it."""
    return {
        "file": file,
        "ms_per_token": 1e3 * per_token,
        "first_ms": None if first is None else 1e3 * first,
        "specrun_fixed": generation.__dict__,
        "prediction": prediction(curve),
    }


def block_prediction(
    passes: dict[int, float], verify: dict[int, float], overhead: float
) -> list[dict[str, float]]:
    """As `prediction`, for a block draft: a round at γ costs one pass of γ, as measured,
    not γ times a token."""
    rows = []
    for alpha in ALPHAS:
        rates = {0: expected_rate(alpha, 0, 0.0, verify[1], overhead)}
        for g, seconds in passes.items():
            if g <= GAMMA_MAX:  # as far as auto goes by default
                rates[g] = expected_rate(alpha, g, seconds / g, verify[g + 1], overhead)
        rows.append(prediction_row(alpha, max(rates, key=rates.__getitem__), rates))
    return rows


def measure_target(
    name: str,
    path: Path,
    draft: Model,
    head: Path | None,
    block: Path | None,
    args: argparse.Namespace,
) -> dict[str, object]:
    """A target's costs and generations with the draft model, or with its MTP layers where
    its file has them, with an EAGLE-3 head and with a block draft where they are given."""
    mtp = read_gguf_info(path).architecture in MTP_ARCHITECTURES
    started = time.perf_counter()
    target = TimedModel(path, n_ctx=args.n_ctx, gpu_layers=args.gpu_layers, load_mtp=mtp)
    loaded = time.perf_counter() - started
    drafts: dict[str, dict[str, object]] = {}
    try:
        prompt = prompt_text(args.prompt_words)
        prompt_tokens = target.tokenize(prompt)
        context = (prompt_tokens * (args.context // len(prompt_tokens) + 1))[: args.context]
        target.logits(
            context + context[: args.widths], args.widths
        )  # untimed: the first calls set up buffers
        verify = measure_verify(
            target, context, args.widths, top=candidate_width(GREEDY, target.n_vocab)
        )
        plain = specrun_generation(target, prompt_tokens, None, 0, args.tokens)

        def fixed(source: DraftSource) -> Generation:
            return specrun_generation(target, prompt_tokens, source, args.gamma, args.tokens)

        def curve(per_token: float, generation: Generation) -> CostCurve:
            measured = generation.draft_ms_per_token
            return CostCurve(
                measured / 1e3 if measured else per_token,
                verify,
                plain.overhead_ms_per_round / 1e3,
            )

        if not mtp:
            per_token = median_of(decode_timer(draft, context, 1))
            run = fixed(ModelDraft(draft, target.n_vocab, p_min=0.0))
            drafts["model"] = drafted(draft.name, per_token, run, curve(per_token, run), None)
            drafts["model"]["specrun_sampled"] = specrun_generation(
                target,
                prompt_tokens,
                ModelDraft(draft, target.n_vocab, p_min=0.0),
                args.gamma,
                args.tokens,
                SAMPLED,
            ).__dict__
        if mtp or head is not None:  # the target keeps the head's rows from here on
            native_head, rows = open_eagle3(head, target) if head and not mtp else open_mtp(target)
            try:
                first, following = head_timers(native_head, rows, target, context)
                first_s, per_token = median_of(first), median_of(following)
                run = fixed(HeadDraft(native_head, rows, target.n_vocab))
            finally:
                native_head.close()
            drafts[native_head.kind] = drafted(
                head.name if head and not mtp else path.name,
                per_token,
                run,
                curve(per_token, run),
                first_s,
            )
        if block is not None:  # last: the target keeps the block's rows from here on
            native_block, rows = open_block(block, target)
            try:
                longest = min(native_block.longest, args.widths - 1)
                passes = {
                    g: median_of(block_timers(native_block, rows, target, context, g).draft)
                    for g in range(1, longest + 1)
                }
                run = fixed(BlockDraft(native_block, rows, target.n_vocab))
            finally:
                native_block.close()
            drafts[native_block.kind] = {
                "file": block.name,
                "pass_ms_by_gamma": {g: 1e3 * s for g, s in passes.items()},
                "specrun_fixed": run.__dict__,
                "prediction": block_prediction(passes, verify, plain.overhead_ms_per_round / 1e3),
            }
        result: dict[str, object] = {
            "file": path.name,
            "size_gib": path.stat().st_size / 2**30,
            "load_seconds": loaded,
            "prompt_tokens": len(prompt_tokens),
            "context": len(context),
            "gamma": args.gamma,
            "verify_ms_by_width": {w: 1e3 * s for w, s in verify.items()},
            "backend_sampling": target.samples_on_device,
            "specrun_plain": plain.__dict__,
            "drafts": drafts,
        }
    finally:
        target.close()
    if args.native:  # after specrun has let go of the GPU memory
        gpu_layers = 999 if args.gpu_layers is None else args.gpu_layers
        result["native_plain"] = attempt(
            lambda: native_plain(args.native, path, prompt, args.tokens, gpu_layers)
        )
        files = {"model": args.draft, "eagle3": head, "mtp": None, "dflash": block, "dspark": block}
        for kind, figures in drafts.items():
            spec = spec_args(DRAFTS[kind][1], files[kind], gpu_layers)
            figures["native"] = attempt(
                lambda spec=spec: native_speculative(
                    args.native, path, spec, prompt, args.tokens, args.gamma, gpu_layers
                )
            )
    return result


def attempt(run: Callable[[], dict[str, float]]) -> dict[str, object]:
    """A native peer's figures, or the error that stopped it."""
    try:
        return dict(run())
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        return {"error": str(error)}


def generation_rows(r: dict) -> list[tuple[str, dict | None]]:
    """The report's configurations: plain, then each draft natively and in specrun."""
    g = r["gamma"]
    rows: list[tuple[str, dict | None]] = [
        ("native llama-completion", r.get("native_plain")),
        ("specrun γ=0", r["specrun_plain"]),
    ]
    for kind, d in r["drafts"].items():
        spec_type = DRAFTS[kind][1]
        label = "" if kind == "model" else f"{kind} "
        rows += [
            (f"native llama-speculative-simple {spec_type} γ={g}", d.get("native")),
            (f"specrun {label}γ={g}", d["specrun_fixed"]),
        ]
        if "specrun_sampled" in d:
            rows.append((f"specrun {label}γ={g} T=0.8", d["specrun_sampled"]))
    return rows


def draft_lines(r: dict) -> list[str]:
    g, lines = r["gamma"], []
    token = next(iter(r["verify_ms_by_width"].values()))  # width 1: a plain token
    for kind, d in r["drafts"].items():
        inside = d["specrun_fixed"]["draft_ms_per_token"]
        if kind in BLOCK_KINDS:
            # The keys are numbers, or text where the results were read back from JSON.
            verify = {int(width): ms for width, ms in r["verify_ms_by_width"].items()}
            per_pass = ", ".join(
                f"γ={gamma}: {ms:.2f} ms ({ms / verify[int(gamma) + 1]:.2f}×)"
                for gamma, ms in d["pass_ms_by_gamma"].items()
            )
            lines.append(
                f"- {DRAFTS[kind][0]} {d['file']}: one pass of γ drafts (beside the target's "
                f"verify of γ+1): {per_pass}; {inside:.2f} ms a drafted token inside the loop "
                f"(γ={g})."
            )
            continue
        first = (
            ""
            if d["first_ms"] is None
            else f"{d['first_ms']:.2f} ms a round's first draft (the committed pair taken in), "
        )
        lines.append(
            f"- {DRAFTS[kind][0]} {d['file']}: {first}{d['ms_per_token']:.2f} ms a token "
            f"decoded alone, {inside:.2f} ms a token inside the loop (γ={g}); "
            f"{d['ms_per_token'] / token:.2f}× the target's token."
        )
    overheads = ", ".join(
        f"{d['specrun_fixed']['overhead_ms_per_round']:.3f} ms at γ={g} ({DRAFTS[kind][0]})"
        for kind, d in r["drafts"].items()
    )
    plain = r["specrun_plain"]["overhead_ms_per_round"]
    lines.append(f"- loop overhead per round: {plain:.3f} ms at γ=0, {overheads}.")
    shares = [("γ=0", r["specrun_plain"])]
    if "model" in r["drafts"]:
        model = r["drafts"]["model"]
        shares += [(f"γ={g} greedy", model["specrun_fixed"])]
        shares += [(f"γ={g} T=0.8", model["specrun_sampled"])]
    shown = [
        f"{row['loop_ms_per_round']:.3f} ms, {row['loop_share']:.1%} at {label}"
        for label, row in shares
        if row.get("loop_share") is not None
    ]
    if shown:
        sampling = "the device" if r.get("backend_sampling") else "the loop (whole rows)"
        lines.append(
            "- the loop's own time a round (all but the decodes) and its share of the round, "
            f"with the draft model; candidates chosen by {sampling}: " + "; ".join(shown) + "."
        )
    return lines


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
        written = (
            ""
            if r.get("models_seconds") is None
            else f"models written in {r['models_seconds']:.0f} s, "
        )
        drafts = ", ".join(f"{DRAFTS[kind][0]} {d['file']}" for kind, d in r["drafts"].items())
        lines += [
            f"## {name} ({r['file']}, {r['size_gib']:.2f} GiB, "
            f"{written}loaded in {r['load_seconds']:.1f} s) with {drafts}",
            "",
        ]
        widths = r["verify_ms_by_width"]
        lines += [
            "| verify width | " + " | ".join(str(w) for w in widths) + " |",
            "|---" * (len(widths) + 1) + "|",
            "| ms | " + " | ".join(f"{ms:.2f}" for ms in widths.values()) + " |",
            "",
        ]
        lines += [*draft_lines(r), ""]
        lines += ["| configuration | tok/s | acceptance |", "|---|---|---|"]
        for label, row in generation_rows(r):
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
        kinds = list(r["drafts"])
        lines += [
            "",
            "Predicted with these costs (acceptance is random here, so α is given): the γ auto "
            "picks, its tok/s and its speedup over plain, with each draft:",
            "",
            "| α | " + " | ".join(DRAFTS[kind][0] for kind in kinds) + " |",
            "|---" * (len(kinds) + 1) + "|",
        ]
        for i, alpha in enumerate(ALPHAS):
            cells = [r["drafts"][kind]["prediction"][i] for kind in kinds]
            lines.append(
                f"| {alpha:.1f} | "
                + " | ".join(
                    f"γ={p['gamma']}, {p['tokens_per_second']:.1f} tok/s, {p['speedup']:.2f}×"
                    for p in cells
                )
                + " |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", type=Path, required=True, help="the draft GGUF")
    parser.add_argument(
        "--target", action="append", required=True, help="NAME=PATH; measured in this order"
    )
    parser.add_argument(
        "--head",
        action="append",
        default=[],
        help="NAME=HEAD.gguf: an EAGLE-3 head for the target NAME, measured beside the draft",
    )
    parser.add_argument(
        "--block",
        action="append",
        default=[],
        help="NAME=DFLASH.gguf: a DFlash or DSpark draft for the target NAME, measured last",
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
    heads = {name: Path(path) for name, _, path in (h.partition("=") for h in args.head)}
    blocks = {name: Path(path) for name, _, path in (b.partition("=") for b in args.block)}
    draft = TimedModel(args.draft, n_ctx=args.n_ctx, gpu_layers=args.gpu_layers)
    for spec in args.target:
        name, _, path = spec.partition("=")
        if "verify_ms_by_width" in results["targets"].get(name, {}):
            print(f"{name}: measured before, kept")
            continue
        if time.time() > args.deadline:
            results["targets"][name] = {"skipped": "out of time"}
        else:
            head, block = heads.get(name), blocks.get(name)
            results["targets"][name] = measure_target(name, Path(path), draft, head, block, args)
            results["targets"][name]["models_seconds"] = args.models_seconds
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
        (args.out / "results.md").write_text(render(results))
        print(f"measured {name}", flush=True)
    draft.close()
    print(render(results))


if __name__ == "__main__":
    main()
