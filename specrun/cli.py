"""The `specrun` command line (Typer). Stdout carries only the answer; everything else
goes to stderr. Every user error is one line, `specrun: error: ...`, and a non-zero exit."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from specrun.errors import OptionError, SpecrunError, report
from specrun.interrupts import exit_status
from specrun.textio import StdoutClosed, argument_text, guarded_stdout, read_stdin

if TYPE_CHECKING:  # imported where used: `specrun --help` should not load llama.cpp
    from specrun.engine import Engine, LookupOptions
    from specrun.runtime import Model
    from specrun.sampling import SamplingParams
    from specrun.stats import Stats

app = typer.Typer(
    name="specrun",
    help="Speculative decoding for GGUF models: a small draft guesses, the big target checks.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)

def print_version(version: bool) -> None:
    if version:
        from specrun import __version__

        print(f"specrun {__version__}")
        raise typer.Exit(0)


@app.callback()
def cli(
    # Eager: handled while parsing, before click asks for the missing command.
    version: bool = typer.Option(False, "--version", is_eager=True, callback=print_version,
                                 help="Print the version and exit."),
) -> None:
    """Speculative decoding for GGUF models: a small draft guesses, the big target checks."""


def note(message: str) -> None:
    """A status line for the user, on stderr."""
    print(f"specrun: {message}", file=sys.stderr, flush=True)


# --- options shared by run, chat and bench ----------------------------------------------

TargetOption = typer.Option(None, "--target", "-t", help="Target model: alias, GGUF path, REPO:QUANT or REPO/FILE.gguf. Default: the demo pair.")
DraftOption = typer.Option(None, "--draft", "-d", help="Draft model (alias, path, ...), `auto` for the catalog's pick, `lookup` for prompt lookup, or `none`.")
CatalogOption = typer.Option(None, "--catalog", help="An extra models.toml that adds or overrides aliases.")
SystemOption = typer.Option(None, "--system", "-s", help="System prompt.")
MaxTokensOption = typer.Option(256, "--max-tokens", "-n", min=1, help="Most tokens to generate per answer.")
TempOption = typer.Option(0.8, "--temp", min=0.0, help="Temperature; 0 is greedy.")
TopKOption = typer.Option(40, "--top-k", min=0, help="Top-k (0 = off).")
# Ranges of top-p and min-p are open at one end, which Typer cannot say: SamplingParams checks them.
TopPOption = typer.Option(0.95, "--top-p", help="Top-p, 0 < p <= 1 (1 = off).")
MinPOption = typer.Option(0.05, "--min-p", help="Min-p, 0 <= p < 1 (0 = off).")
SeedOption = typer.Option(None, "--seed", min=0, help="Seed for a reproducible sampled run.")
GammaOption = typer.Option("auto", "--gamma", "-g", help="Draft length: auto, heuristic or a number (0 = no speculation).")
GammaMaxOption = typer.Option(8, "--gamma-max", min=0, max=32, help="Upper bound of γ for auto/heuristic.")
PMinOption = typer.Option(0.0, "--p-min", min=0.0, max=1.0, help="Stop drafting when the draft's confidence falls below this.")
CtxOption = typer.Option(None, "--ctx", "-c", min=16, show_default=False,
                         help="Context size in tokens (default: 4096, or the model's trained context if smaller).")
GpuLayersOption = typer.Option(None, "--gpu-layers", "-ngl", help="Target layers on the GPU (default: all where supported).")
DraftGpuLayersOption = typer.Option(None, "--draft-gpu-layers", "-ngld", help="Draft layers on the GPU (default: all where supported).")
ThreadsOption = typer.Option(None, "--threads", min=1, help="CPU threads per model (default: one per physical core).")
VerboseOption = typer.Option(False, "--verbose", "-v", help="Show llama.cpp's log.")
LookupOption = typer.Option(False, "--lookup", help="Prompt lookup first, the draft model when the text offers no match.")
LookupNgramOption = typer.Option(3, "--lookup-ngram", min=1, max=8, help="Longest n-gram prompt lookup matches.")
LookupMinOption = typer.Option(2, "--lookup-min", min=1, max=8, help="Shortest n-gram prompt lookup matches.")
LookupMaxOption = typer.Option(10, "--lookup-max", min=1, max=64, help="Most tokens prompt lookup proposes.")


DEMO_TARGET, DEMO_DRAFT = "demo-target", "demo-draft"  # catalog aliases of the embedded pair
DEFAULT_CTX = 4096


@dataclass
class ModelChoice:
    target: Path
    draft: Path | None  # Path(LOOKUP) for prompt lookup


def choose_models(target: str | None, draft: str | None, catalog: Path | None) -> ModelChoice:
    """Resolve --target/--draft to files, downloading through the catalog where needed.

    Without --target: the embedded demo pair. Without --draft: the target alone.
    `--draft lookup` is prompt lookup, which needs no file.
    """
    from specrun.catalog import load_catalog, resolve_model, resolve_pair
    from specrun.engine import LOOKUP

    models = load_catalog(catalog)
    if target is None:
        target, draft = DEMO_TARGET, DEMO_DRAFT if draft is None else draft
        using = ("pair (SmolLM2-135M-Instruct, F16 target, Q4_0 draft)" if draft == DEMO_DRAFT
                 else "target (SmolLM2-135M-Instruct, F16)")
        note(f"no --target given: using the demo {using}")
    if draft in (None, "none", LOOKUP):
        resolved = resolve_model(target, catalog=models)
        return ModelChoice(resolved.path, Path(LOOKUP) if draft == LOOKUP else None)
    resolved_target, resolved_draft = resolve_pair(target, draft, catalog=models)
    return ModelChoice(resolved_target.path, resolved_draft.path)


def check_drafting_options(gamma: str, gamma_max: int, lookup_ngram: int, lookup_min: int,
                           lookup_max: int) -> "LookupOptions":
    """--gamma and the lookup options, checked before any work rather than when the models are loaded."""
    from specrun.engine import LookupOptions
    from specrun.gamma import parse_policy

    parse_policy(gamma, gamma_max)  # the engine makes its own policy; this only checks the values
    return LookupOptions(lookup_ngram, lookup_min, lookup_max)


def choose_threads(requested: Optional[int]) -> int:
    """--threads, or one per physical core; says so when it caps the request."""
    from specrun.cpus import choose_threads as threads_for

    threads, capped = threads_for(requested)
    if capped:
        note(capped)
    return threads


def load_notes(model: "Model", *, requested_ctx: Optional[int], requested_threads: Optional[int]) -> None:
    """Once the models are loaded: say when the context is not the --ctx asked for, and when
    the default thread count meets a machine that other work already keeps busy."""
    from specrun.cpus import machine_busy_warning

    if requested_ctx is not None and model.n_ctx < requested_ctx:
        note(f"--ctx {requested_ctx} is more than {model.name} was trained for ({model.n_ctx_train}); "
             f"using {model.n_ctx}")
    elif requested_ctx is not None and model.n_ctx > requested_ctx:
        note(f"--ctx {requested_ctx}: llama.cpp allocates the context in steps of 256 tokens; using {model.n_ctx}")
    busy = machine_busy_warning() if requested_threads is None else None
    if busy:
        note(busy)


def load_engine(choice: ModelChoice, *, ctx: Optional[int], gpu_layers: Optional[int],
                draft_gpu_layers: Optional[int], threads: int, verbose: bool, gamma: str, gamma_max: int,
                p_min: float, params: "SamplingParams", lookup: bool, lookup_options: "LookupOptions") -> "Engine":
    """Load the models; `threads` comes from choose_threads, `lookup_options` from check_drafting_options."""
    from specrun.engine import LOOKUP, Engine, LoadOptions

    warn_ignored_gpu_layers(gpu_layers, draft_gpu_layers)
    options = LoadOptions(n_ctx=ctx or DEFAULT_CTX, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                          threads=threads, verbose=verbose)
    return Engine.load(choice.target, choice.draft, options=options, p_min=p_min,
                       lookup=lookup_options if lookup or choice.draft == Path(LOOKUP) else None,
                       params=params, gamma=gamma, gamma_max=gamma_max)


def warn_ignored_gpu_layers(*requested: Optional[int]) -> None:
    """--gpu-layers on a build that cannot offload would otherwise be ignored without a word."""
    from specrun.runtime import gpu_offload_supported

    if any(layers for layers in requested) and not gpu_offload_supported():
        note("--gpu-layers is ignored: this llama.cpp build has no GPU backend (see `specrun doctor`)")


def read_prompt(argument: str | None) -> str:
    """stdin first (when it is not a terminal), then the argument."""
    parts = []
    piped = read_stdin()
    if piped and piped.strip():
        parts.append(piped.rstrip("\n"))
    if argument:
        parts.append(argument_text(argument, "the prompt argument"))
    if not parts:
        raise OptionError("no prompt: give one as an argument or on stdin")
    return "\n\n".join(parts)


@app.command()
def run(
    prompt: Optional[str] = typer.Argument(None, help="The prompt; stdin, when piped, comes before it."),
    target: Optional[str] = TargetOption,
    draft: Optional[str] = DraftOption,
    lookup: bool = LookupOption,
    lookup_ngram: int = LookupNgramOption,
    lookup_min: int = LookupMinOption,
    lookup_max: int = LookupMaxOption,
    catalog: Optional[Path] = CatalogOption,
    system: Optional[str] = SystemOption,
    raw: bool = typer.Option(False, "--raw", help="Send the text as is, without the chat template."),
    max_tokens: int = MaxTokensOption,
    temp: float = TempOption,
    top_k: int = TopKOption,
    top_p: float = TopPOption,
    min_p: float = MinPOption,
    seed: Optional[int] = SeedOption,
    stop: list[str] = typer.Option([], "--stop", help="Stop at this text (repeatable)."),
    gamma: str = GammaOption,
    gamma_max: int = GammaMaxOption,
    p_min: float = PMinOption,
    ctx: int = CtxOption,
    gpu_layers: Optional[int] = GpuLayersOption,
    draft_gpu_layers: Optional[int] = DraftGpuLayersOption,
    threads: Optional[int] = ThreadsOption,
    stats: bool = typer.Option(False, "--stats", help="Print statistics to stderr."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (text and statistics) instead of the text."),
    verbose: bool = VerboseOption,
) -> None:
    """Generate one answer, streamed to stdout."""
    from specrun.sampling import SamplingParams
    from specrun.stats import Stats

    params = SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    lookup_options = check_drafting_options(gamma, gamma_max, lookup_ngram, lookup_min, lookup_max)
    system, stop = argument_text(system, "--system"), [argument_text(text, "--stop") for text in stop]
    text = read_prompt(prompt)
    choice = choose_models(target, draft, catalog)
    engine = load_engine(choice, ctx=ctx, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                         threads=choose_threads(threads), verbose=verbose, gamma=gamma, gamma_max=gamma_max,
                         p_min=p_min, params=params, lookup=lookup, lookup_options=lookup_options)
    load_notes(engine.target, requested_ctx=ctx, requested_threads=threads)
    figures = Stats()
    answer: list[str] = []
    try:
        tokens = engine.prompt(text, system=system, raw=raw)
        for event in engine.stream(tokens, max_tokens=max_tokens, stop=stop):
            figures.add(event)
            chunk = getattr(event, "text", "")
            if chunk:
                answer.append(chunk)
                if not as_json:
                    sys.stdout.write(chunk)
                    sys.stdout.flush()
    except KeyboardInterrupt as interrupt:  # Ctrl-C, SIGTERM, SIGHUP: keep the text, end the JSON object
        figures.finish_reason = "interrupted"
        _finish_output(answer, figures, engine, choice, as_json=as_json, stats=stats)
        note("interrupted")
        raise typer.Exit(exit_status(interrupt))
    finally:
        engine.close()
    _finish_output(answer, figures, engine, choice, as_json=as_json, stats=stats)


def _finish_output(answer: list[str], figures: "Stats", engine: "Engine", choice: ModelChoice, *,
                   as_json: bool, stats: bool) -> None:
    from specrun.speculative import more_room_hint

    threads = engine.target.threads
    where = engine.placement()
    if as_json:
        record = {"text": "".join(answer), "target": str(choice.target),
                  "draft": str(choice.draft) if choice.draft else None, "threads": threads, **where,
                  **figures.as_dict()}
        sys.stdout.write(json.dumps(record) + "\n")
    elif answer and not "".join(answer).endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
    if figures.finish_reason == "context" and not as_json:
        note(f"the answer was cut at the end of the context ({engine.target.n_ctx} tokens)"
             f"{more_room_hint(engine.target)}")
    if stats:
        for line in figures.summary_lines(extra=[("threads", str(threads)), placement_row(where)]):
            print(line, file=sys.stderr)


def placement_row(where: dict[str, object]) -> tuple[str, str]:
    """The `--stats` row that says where the models ran."""
    return "device", f"{where['device']}, GPU layers {' + '.join(where['gpu_layers'])}"


@app.command()
def bench(
    target: Optional[str] = TargetOption,
    draft: Optional[str] = DraftOption,
    catalog: Optional[Path] = CatalogOption,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSONL file of {\"prompt\": ..., \"class\": ...}; default: the built-in set."),
    gammas: str = typer.Option("1,2,3,4,6,8", "--gammas", help="Fixed γ values to compare."),
    modes: Optional[str] = typer.Option(None, "--modes", help="Only these modes, comma-separated (plain, γ=N, heuristic, auto, lookup, hybrid)."),
    lookup: bool = typer.Option(True, "--lookup/--no-lookup", help="Include prompt lookup and the hybrid."),
    lookup_ngram: int = LookupNgramOption,
    lookup_min: int = LookupMinOption,
    lookup_max: int = LookupMaxOption,
    repeat: int = typer.Option(3, "--repeat", "-r", min=1, help="Repetitions; the table shows medians."),
    max_tokens: int = typer.Option(128, "--max-tokens", "-n", min=1, help="Tokens per generation."),
    temp: float = typer.Option(0.0, "--temp", min=0.0, help="Temperature (0: outputs must be identical, and are checked)."),
    seed: Optional[int] = typer.Option(0, "--seed", help="Seed for sampled runs."),
    gamma_max: int = typer.Option(8, "--gamma-max", min=1, max=32, help="Upper bound of γ for auto/heuristic."),
    p_min: float = PMinOption,
    ctx: int = CtxOption,
    gpu_layers: Optional[int] = GpuLayersOption,
    draft_gpu_layers: Optional[int] = DraftGpuLayersOption,
    threads: Optional[int] = ThreadsOption,
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every run and figure to this file."),
    plot_path: Optional[Path] = typer.Option(None, "--plot", help="Draw tokens/s against γ to this PNG (needs matplotlib)."),
    verbose: bool = VerboseOption,
) -> None:
    """Compare plain decoding, fixed γ, heuristic, auto and prompt lookup on a prompt set."""
    from specrun import bench as benchmark
    from specrun.engine import LookupOptions
    from specrun.files import check_output_file, replaced_atomically
    from specrun.runtime import Model
    from specrun.sampling import SamplingParams

    try:
        gamma_values = [int(g) for g in gammas.split(",") if g.strip()]
    except ValueError:
        raise OptionError(f"--gammas must be numbers separated by commas, got {gammas!r}") from None
    if any(not 1 <= g <= gamma_max for g in gamma_values):
        raise OptionError(f"--gammas must lie in 1..--gamma-max ({gamma_max})")
    lookup_options = LookupOptions(lookup_ngram, lookup_min, lookup_max)
    warn_ignored_gpu_layers(gpu_layers, draft_gpu_layers)
    params = SamplingParams(temperature=temp, seed=seed)
    # Before the benchmark runs, not after: its results must have somewhere to go.
    json_file = check_output_file(json_path, "--json") if json_path else None
    plot_file = check_output_file(plot_path, "--plot") if plot_path else None
    prompt_set = benchmark.load_prompts(prompts)
    choice = choose_models(target, None if draft == "lookup" else draft, catalog)
    chosen = benchmark.default_modes(gamma_values, choice.draft is not None, lookup)
    if modes:
        wanted = [m.strip() for m in modes.split(",")]
        unknown = [m for m in wanted if m not in {mode.name for mode in chosen}]
        if unknown:
            raise OptionError(f"unknown mode(s) {', '.join(unknown)}; available: {', '.join(m.name for m in chosen)}")
        chosen = [m for m in chosen if m.name == "plain" or m.name in wanted]
    thread_count = choose_threads(threads)
    with Model(choice.target, n_ctx=ctx or DEFAULT_CTX, gpu_layers=gpu_layers, threads=thread_count,
               verbose=verbose) as target_model:
        draft_model = (Model(choice.draft, n_ctx=target_model.n_ctx, gpu_layers=draft_gpu_layers,
                             threads=thread_count, verbose=verbose) if choice.draft is not None else None)
        try:
            if draft_model is not None:
                from specrun.runtime import check_compatible

                check_compatible(target_model, draft_model)
            load_notes(target_model, requested_ctx=ctx, requested_threads=threads)
            note(f"bench: {len(prompt_set)} prompts x {len(chosen)} modes x {repeat} repetitions, "
                 f"{max_tokens} tokens each")
            result = benchmark.run_bench(
                target_model, draft_model, prompt_set, chosen, params=params, max_tokens=max_tokens,
                repeat=repeat, gamma_max=gamma_max, p_min=p_min,
                lookup=lookup_options, progress=lambda line: note(f"bench: {line}"),
            )
        finally:
            if draft_model is not None:
                draft_model.close()
    # The files first: they hold every run, stdout only the summary (and may be a closed pipe).
    if json_file:
        with replaced_atomically(json_file) as partial:
            partial.write_text(result.to_json(), encoding="utf-8")
        note(f"wrote {json_path}")
    if plot_file:
        with replaced_atomically(plot_file) as partial:
            benchmark.plot(result, partial)
        note(f"wrote {plot_path}")
    print(benchmark.render_text(result))
    for verdict in benchmark.auto_verdicts(result):
        print(verdict)


@app.command()
def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the report."),
) -> None:
    """The llama.cpp build, its devices, the model caches, and a fix for each problem found."""
    from specrun import doctor as checkup

    report = checkup.gather()
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print("\n".join(checkup.render_text(report)))


from specrun.models_cli import app as models_app  # noqa: E402  (after `app`, which it does not import)

app.add_typer(models_app, name="models", help="List, download, inspect and remove catalog models.")


# --- entry point ---------------------------------------------------------------------------


def entry() -> None:
    """The `specrun` command: `main` in a supervised child, so a native crash explains itself."""
    from specrun import interrupts
    from specrun.supervise import supervise

    def work() -> int:
        interrupts.install()
        return main()

    sys.exit(supervise(work))


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and turn every failure into one line and an exit status."""
    command = typer.main.get_command(app)
    try:
        with guarded_stdout():  # specrun.textio's output policy, Typer's own output included
            result = command.main(args=argv, prog_name="specrun", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except typer.TyperException as error:  # click's usage errors (typer vendors click)
        ctx = getattr(error, "ctx", None)
        if type(error).__name__ == "NoArgsIsHelpError":
            print(ctx.get_help() if ctx else error.format_message(), file=sys.stderr)
            return 2
        hint = f" (see `{ctx.command_path} --help`)" if ctx else ""
        print(f"specrun: error: {error.format_message()}{hint}", file=sys.stderr)
        return error.exit_code
    except typer.Exit as exit_:
        return exit_.exit_code
    except SpecrunError as error:
        return report(error)
    except (KeyboardInterrupt, typer.Abort) as stop:
        print("\nspecrun: interrupted", file=sys.stderr)
        return exit_status(stop.__cause__ or stop)  # click turns a KeyboardInterrupt into Abort
    except StdoutClosed:  # the reader went away (`| head`): it has what it wanted
        return 0


import specrun.chat_cli  # noqa: E402,F401  (registers `chat` on app; last, as it imports the options above)
