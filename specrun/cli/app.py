"""The `specrun` command line (Typer). Stdout carries only the answer; everything else
goes to stderr. Every user error is one line, `specrun: error: ...`, and a non-zero exit.

The commands are thin: their shared options, the model choice and the loading live in
`specrun.cli.options`; `chat` and `models` have modules of their own, registered here.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from specrun.cli.chat import chat
from specrun.cli.constraint import ConstraintOptions, grammar_of
from specrun.cli.heads import app as heads_app
from specrun.cli.helptext import DRAFTING_PANEL, OUTPUT_PANEL, SAMPLING_PANEL, GroupedHelp
from specrun.cli.models import app as models_app
from specrun.cli.options import (
    DRAFTING,
    LOAD,
    LOOKUP,
    LOOKUP_GROUP,
    MAX_TOKENS,
    MODELS,
    P_MIN,
    SAMPLING,
    SYSTEM,
    ModelChoice,
    ModelRequest,
    busy_note,
    comma_list,
    in_flag_terms,
    load_engine,
    load_notes,
    note,
    placement_row,
    read_prompt,
    system_prompt,
    takes,
)
from specrun.cli.ps import ps
from specrun.cli.rpc import rpc_server
from specrun.cli.serve import serve
from specrun.core.sampling import SamplingParams
from specrun.errors import Interrupted, OptionError, SpecrunError, report
from specrun.options import DraftOptions, LoadOptions, LookupOptions
from specrun.system import interrupts
from specrun.system.interrupts import exit_status, interrupted
from specrun.system.numerals import whole_number
from specrun.system.textio import StdoutClosed, argument_text, guarded_stdout

if TYPE_CHECKING:
    from specrun.core.loop import Event
    from specrun.core.stats import ReportedFinishReason
    from specrun.engine import Engine
    from specrun.llama.placement import Placement

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
    context: typer.Context,
    # Eager: handled while parsing, before click asks for the missing command.
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=print_version,
        help="Print the version and exit.",
    ),
) -> None:
    """Speculative decoding for GGUF models: a small draft guesses, the big target checks."""
    if context.invoked_subcommand != "run":  # run takes them where its answer can be written
        interrupts.take()


@app.command(cls=GroupedHelp)
@takes(MODELS, DRAFTING, SAMPLING, LOAD)
def run(
    prompt: str | None = typer.Argument(
        None, metavar="PROMPT", help="The prompt; stdin, when piped, comes before it."
    ),
    system: str | None = SYSTEM,
    raw: bool = typer.Option(
        False,
        "--raw",
        rich_help_panel=OUTPUT_PANEL,
        help="Send the text as is, without the chat template; special-token text in it "
        "(e.g. <|im_start|>) becomes those tokens, as in llama.cpp.",
    ),
    max_tokens: int = MAX_TOKENS,
    stop: list[str] = typer.Option(
        [],
        "--stop",
        metavar="TEXT",
        rich_help_panel=OUTPUT_PANEL,
        help="Stop at this text (repeatable).",
    ),
    stats: bool = typer.Option(
        False, "--stats", rich_help_panel=OUTPUT_PANEL, help="Print statistics to stderr."
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        rich_help_panel=OUTPUT_PANEL,
        help="Print one JSON object (text and statistics) instead of the text.",
    ),
    grammar: str | None = typer.Option(
        None,
        "--grammar",
        metavar="GBNF|FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Constrain the answer to this GBNF grammar (llama.cpp's), drafts and all: the "
        "grammar itself (text with a rule, `::=`) or, without one, a file.",
    ),
    grammar_file: Path | None = typer.Option(
        None,
        "--grammar-file",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Constrain the answer to the GBNF grammar in this file.",
    ),
    schema: str | None = typer.Option(
        None,
        "--json-schema",
        "-j",
        metavar="SCHEMA|FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Constrain the answer to JSON this schema allows: the schema itself (text "
        "starting with `{`) or, without one, a JSON file.",
    ),
    schema_file: Path | None = typer.Option(
        None,
        "--json-schema-file",
        "-jf",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Constrain the answer to JSON the schema in this file allows.",
    ),
    *,
    sampling: SamplingParams,
    drafting: DraftOptions,
    load: LoadOptions,
    models: ModelRequest,
) -> None:
    """Generate one answer, streamed to stdout."""
    from specrun.llama.supervise import on_abort

    answer = _Answer(models, load, as_json=as_json, stats=stats)
    try:
        with on_abort(answer.abandon):
            interrupts.take()  # a stop from the first moment on: the answer is written out
            system, stop = (
                system_prompt(system),
                [argument_text(text, "--stop") for text in stop],
            )
            constraint = grammar_of(
                ConstraintOptions(
                    argument_text(grammar, "--grammar"),
                    grammar_file,
                    argument_text(schema, "--json-schema"),
                    schema_file,
                )
            )
            text = read_prompt(prompt)
            answer.choice = models.resolve()
            engine = load_engine(answer.choice, load, params=sampling, drafting=drafting)
            answer.loaded(engine)
            load_notes(engine.target, load)
            tokens = engine.prompt(text, system=system, raw=raw)
            for event in engine.stream(
                tokens, max_tokens=max_tokens, stop=stop, grammar=constraint
            ):
                answer.add(event)
    # Ctrl-C, SIGTERM, SIGHUP, from the start on: keep the text, end the JSON object.
    except (KeyboardInterrupt, Interrupted) as interrupt:
        answer.finish("interrupted")
        if isinstance(interrupt, Interrupted):
            raise  # its own line says what was stopped (a download) and what the next run does
        note("interrupted")
        raise typer.Exit(exit_status(interrupt)) from None
    finally:
        if answer.engine is not None:
            answer.engine.close()
    answer.finish()


class _Answer:
    """What `run` has so far, written out once however the run ends: the answer's last
    newline or the `--json` object, then the notes and `--stats`."""

    def __init__(
        self, request: ModelRequest, load: LoadOptions, *, as_json: bool, stats: bool
    ) -> None:
        from specrun.core.stats import Stats

        self.request, self.load = request, load
        self.as_json, self.stats = as_json, stats
        self.choice: ModelChoice | None = None
        self.engine: Engine | None = None
        self.where: Placement | None = None
        self.parts: list[str] = []
        self.figures = Stats()
        self._finished = False

    def loaded(self, engine: Engine) -> None:
        self.engine, self.where = engine, engine.placement()

    def add(self, event: Event) -> None:
        self.figures.add(event)
        chunk = getattr(event, "text", "")
        if chunk:
            self.parts.append(chunk)
            if not self.as_json:
                sys.stdout.write(chunk)
                sys.stdout.flush()

    def abandon(self, error: str) -> None:
        """A native abort ends the process (a lost RPC server): the JSON object still
        comes, with the text so far, before the supervisor's error line."""
        if self.as_json:
            self.finish("error", error=error)

    def finish(
        self, reason: ReportedFinishReason | None = None, *, error: str | None = None
    ) -> None:
        from specrun.core.loop import more_room_hint

        if self._finished:
            return
        self._finished = True
        if reason is not None:
            self.figures.finish_reason = reason
        text = "".join(self.parts)
        if self.as_json:
            record = {"text": text, **self._models(), **self.figures.as_dict()}
            if error is not None:
                record["error"] = error
            sys.stdout.write(json.dumps(record) + "\n")
        elif text and not text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        engine = self.engine
        if engine is None:
            return
        if self.figures.finish_reason == "context" and not self.as_json:
            note(
                in_flag_terms(
                    f"the answer was cut at the end of the context ({engine.target.n_ctx} tokens)"
                    f"{more_room_hint(engine.target)}"
                )
            )
        if self.stats and self.where is not None:
            extra = [("threads", str(engine.target.threads)), placement_row(self.where)]
            if engine.draft is not None:
                extra.insert(0, ("draft", f"{engine.draft.name} ({engine.draft.kind})"))
            for line in self.figures.summary_lines(extra=extra):
                print(line, file=sys.stderr)
        if reason is None:  # ended by itself: its speed is whole
            busy_note(engine.contention, self.load)

    def _models(self) -> dict[str, object]:
        """The record's model fields: the files, threads and placement, as far as known."""
        choice = self.choice
        if choice is None:  # stopped before the models were resolved: as they were asked for
            return {"target": self.request.target, "draft": self.request.draft}
        record: dict[str, object] = {"target": str(choice.target), "draft": choice.draft_spec}
        if self.engine is not None:
            record["draft_kind"] = self.engine.draft.kind if self.engine.draft else None
        if self.engine is not None and self.where is not None:
            record |= {"threads": self.engine.target.threads, **self.where.as_dict()}
        return record


BENCH_PANEL = "Benchmark"


@app.command(cls=GroupedHelp)
@takes(MODELS, LOOKUP_GROUP, LOAD)
def bench(
    prompts: Path | None = typer.Option(
        None,
        "--prompts",
        metavar="FILE",
        rich_help_panel=BENCH_PANEL,
        help='JSONL file of {"prompt": ..., "class": ...}; default: the built-in set.',
    ),
    agentic: bool = typer.Option(
        False,
        "--agentic",
        rich_help_panel=BENCH_PANEL,
        help="Agentic episodes instead of prompts: requests sent one after another, "
        "conversations carrying each mode's own answers.",
    ),
    episodes: Path | None = typer.Option(
        None,
        "--episodes",
        metavar="FILE",
        rich_help_panel=BENCH_PANEL,
        help="JSONL file of episodes (name, kind, history, system, turns); implies --agentic.",
    ),
    gammas: str = typer.Option(
        "1,2,3,4,6,8",
        "--gammas",
        metavar="N[,N...]",
        rich_help_panel=BENCH_PANEL,
        help="Fixed γ values to compare.",
    ),
    modes: str | None = typer.Option(
        None,
        "--modes",
        metavar="MODE[,MODE...]",
        rich_help_panel=BENCH_PANEL,
        help="Only these modes, comma-separated (plain, γ=N, heuristic, auto, lookup, suffix, "
        "lookup tree, suffix tree, hybrid).",
    ),
    include_lookup: bool = typer.Option(
        True,
        "--lookup/--no-lookup",
        rich_help_panel=BENCH_PANEL,
        help="Include prompt lookup, suffix drafts (and their trees, with --tree) and the hybrid.",
    ),
    repeat: int = typer.Option(
        3,
        "--repeat",
        "-r",
        min=1,
        rich_help_panel=BENCH_PANEL,
        help="Repetitions; the table shows medians.",
    ),
    max_tokens: int = typer.Option(
        128,
        "--max-tokens",
        "-n",
        "--n-predict",
        min=1,
        rich_help_panel=BENCH_PANEL,
        help="Tokens per generation.",
    ),
    temp: float = typer.Option(
        0.0,
        "--temp",
        min=0.0,
        rich_help_panel=SAMPLING_PANEL,
        help="Temperature (0: outputs must be identical, and are checked).",
    ),
    seed: int | None = typer.Option(
        0, "--seed", rich_help_panel=SAMPLING_PANEL, help="Seed for sampled runs."
    ),
    gamma_max: int | None = typer.Option(
        DraftOptions.gamma_max,
        "--gamma-max",
        "--draft-max",
        rich_help_panel=DRAFTING_PANEL,
        min=1,
        max=32,
        show_default=False,
        help="Upper bound of γ for auto/heuristic [default: 8, or a block draft's block where "
        "longer].",
    ),
    p_min: float = P_MIN,
    json_path: Path | None = typer.Option(
        None,
        "--json",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Write every run and figure to this file.",
    ),
    plot_path: Path | None = typer.Option(
        None,
        "--plot",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Draw tokens/s against γ to this file: .png, .pdf, .svg, ... (needs matplotlib).",
    ),
    *,
    lookup: LookupOptions,
    load: LoadOptions,
    models: ModelRequest,
) -> None:
    """Compare plain decoding, fixed γ, heuristic, auto and prompt lookup on a prompt set."""
    from specrun import bench as benchmark
    from specrun.system.files import check_output_file, replaced_atomically

    numbers = [whole_number(g) for g in comma_list(gammas, "--gammas")]
    gamma_values = [g for g in numbers if g is not None]
    if len(gamma_values) < len(numbers):
        raise OptionError(f"--gammas must be numbers separated by commas, got {gammas!r}")
    if gamma_max is not None:  # else the draft's decides, once it is loaded
        _check_gammas(gamma_values, gamma_max)
    params = SamplingParams(temperature=temp, seed=seed)
    # Before the benchmark runs, not after: its results must have somewhere to go.
    json_file = check_output_file(json_path, "--json") if json_path else None
    plot_file = check_output_file(plot_path, "--plot") if plot_path else None
    plot_format = benchmark.plot_format(plot_path) if plot_path else None
    if prompts is not None and (agentic or episodes is not None):
        raise OptionError("--prompts and --agentic/--episodes each give the requests: give one")
    episode_set = benchmark.load_episodes(episodes) if agentic or episodes is not None else None
    prompt_set = [] if episode_set else benchmark.load_prompts(prompts)
    # Prompt lookup is one of the modes compared, so a draft of `lookup` means no model, and
    # the default draft leaves it out.
    choice = replace(models, draft="none" if models.draft == LOOKUP else models.draft).resolve(
        free=None
    )
    if len(choice.drafts) > 1:
        raise OptionError("bench compares the modes of one draft: give one --draft")
    chosen = benchmark.default_modes(
        gamma_values,
        choice.draft is not None,
        include_lookup,
        trees=load.tree_branches > 1 and not load.reproducible,
    )
    if modes is not None:
        wanted = comma_list(modes, "--modes")
        unknown = [m for m in wanted if m not in {mode.name for mode in chosen}]
        if unknown:
            raise OptionError(
                f"unknown mode(s) {', '.join(unknown)}; "
                f"available: {', '.join(m.name for m in chosen)}"
            )
        chosen = [m for m in chosen if m.name == "plain" or m.name in wanted]
    drafting = DraftOptions(p_min=p_min, gamma_max=gamma_max)
    with load_engine(choice, load, drafting=drafting) as engine:
        _check_gammas(gamma_values, engine.gamma_max)
        load_notes(engine.target, load)
        requests = (
            f"{len(episode_set)} episodes ({sum(len(e.turns) for e in episode_set)} requests)"
            if episode_set
            else f"{len(prompt_set)} prompts"
        )
        note(
            f"bench: {requests} x {len(chosen)} modes x {repeat} repetitions, "
            f"{max_tokens} tokens each"
        )
        result = benchmark.run_bench(
            engine.target,
            engine.draft,
            prompt_set,
            chosen,
            params=params,
            max_tokens=max_tokens,
            repeat=repeat,
            gamma_max=engine.gamma_max,
            lookup=lookup,
            placement=engine.placement(),
            progress=lambda line: note(f"bench: {line}"),
            episodes=episode_set,
        )
    # The files first: they hold every run, stdout only the summary (and may be a closed pipe).
    # A plot that fails still leaves the table printed; its error comes after.
    if json_file:
        with replaced_atomically(json_file) as partial:
            partial.write_text(result.to_json(), encoding="utf-8")
        note(f"wrote {json_path}")
    plot_failure = None
    if plot_file:
        try:
            with replaced_atomically(plot_file) as partial:
                benchmark.plot(result, partial, plot_format)
            note(f"wrote {plot_path}")
        except SpecrunError as error:
            plot_failure = error
    print(benchmark.render_text(result))
    for verdict in benchmark.auto_verdicts(result):
        print(verdict)
    sys.stdout.flush()  # the note qualifies the table, so it comes after it
    busy_note(result.contention, load)
    if plot_failure is not None:
        raise plot_failure


@app.command()
def doctor(
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object instead of the report."
    ),
) -> None:
    """The llama.cpp build, its devices, the model caches, and a fix for each problem found."""
    from specrun import doctor as checkup

    report = checkup.gather()
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print("\n".join(checkup.render_text(report)))


app.command("chat", cls=GroupedHelp)(chat)
app.command("serve", cls=GroupedHelp)(serve)
app.command("ps")(ps)
app.command("rpc-server")(rpc_server)
app.add_typer(models_app, name="models", help="List, download, inspect and remove catalog models.")
app.add_typer(heads_app, name="heads", help="Train EAGLE-3 heads for a target (needs torch).")


# --- the command line, in the supervised child (specrun.__main__) ----------------------------


def _check_gammas(gammas: list[int], gamma_max: int) -> None:
    if any(not 1 <= g <= gamma_max for g in gammas):
        raise OptionError(f"--gammas must lie in 1..--gamma-max ({gamma_max})")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and turn every failure into one line and an exit status."""
    command = typer.main.get_command(app)
    args = sys.argv[1:] if argv is None else argv
    try:
        with guarded_stdout():  # specrun.system.textio's output policy, Typer's own output included
            try:
                # Not `command.main`: it turns a KeyboardInterrupt (any stop signal) into exit
                # status 130 and returns a command's Exit as a value, so none reached here.
                with command.make_context("specrun", list(args)) as context:
                    result = command.invoke(context)
            finally:
                interrupts.take()  # one held through --help, --version or a usage error wins
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
        return report(error, in_flag_terms)
    except (KeyboardInterrupt, typer.Abort) as stop:
        return interrupted(stop.__cause__ or stop)  # click turns a KeyboardInterrupt into Abort
    except StdoutClosed:  # the reader went away (`| head`): it has what it wanted
        return 0
