"""`specrun chat`: a multi-turn conversation, in the TUI on a terminal, else through a pipe.

Piped, each line on stdin is a user turn and each reply goes to stdout followed by a
blank line, so a shell script can hold a conversation. Every turn renders the whole
conversation; both models' caches keep the prefix they share with the previous turn,
so only the new turn is evaluated.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from specrun.cli import (
    CatalogOption,
    CtxOption,
    DraftGpuLayersOption,
    DraftOption,
    GammaMaxOption,
    GammaOption,
    GpuLayersOption,
    LookupMaxOption,
    LookupMinOption,
    LookupNgramOption,
    LookupOption,
    MaxTokensOption,
    MinPOption,
    PMinOption,
    SeedOption,
    SystemOption,
    TargetOption,
    TempOption,
    ThreadsOption,
    TopKOption,
    TopPOption,
    VerboseOption,
    app,
    check_drafting_options,
    choose_models,
    choose_threads,
    load_engine,
    load_notes,
    note,
    placement_row,
)

from specrun import interrupts
from specrun.interrupts import exit_status
from specrun.textio import argument_text

if TYPE_CHECKING:
    from specrun.engine import Engine


def chat(
    target: Optional[str] = TargetOption,
    draft: Optional[str] = DraftOption,
    lookup: bool = LookupOption,
    lookup_ngram: int = LookupNgramOption,
    lookup_min: int = LookupMinOption,
    lookup_max: int = LookupMaxOption,
    catalog: Optional[Path] = CatalogOption,
    system: Optional[str] = SystemOption,
    max_tokens: int = MaxTokensOption,
    temp: float = TempOption,
    top_k: int = TopKOption,
    top_p: float = TopPOption,
    min_p: float = MinPOption,
    seed: Optional[int] = SeedOption,
    gamma: str = GammaOption,
    gamma_max: int = GammaMaxOption,
    p_min: float = PMinOption,
    ctx: int = CtxOption,
    gpu_layers: Optional[int] = GpuLayersOption,
    draft_gpu_layers: Optional[int] = DraftGpuLayersOption,
    threads: Optional[int] = ThreadsOption,
    stats: bool = typer.Option(False, "--stats", help="Piped: print each answer's statistics to stderr."),
    verbose: bool = VerboseOption,
) -> None:
    """Chat with a model: the TUI on a terminal; piped, one user turn per stdin line."""
    from specrun.sampling import SamplingParams

    params = SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    lookup_options = check_drafting_options(gamma, gamma_max, lookup_ngram, lookup_min, lookup_max)
    system = argument_text(system, "--system")
    choice = choose_models(target, draft, catalog)
    thread_count = choose_threads(threads)  # before the TUI takes the screen, so the warning stays readable

    def load() -> "Engine":
        return load_engine(choice, ctx=ctx, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                           threads=thread_count, verbose=verbose, gamma=gamma, gamma_max=gamma_max,
                           p_min=p_min, params=params, lookup=lookup, lookup_options=lookup_options)

    if sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty():
        from specrun_tui import SpecrunApp

        if verbose:  # llama.cpp writes to the terminal directly and would garble the screen
            note("--verbose is ignored in the TUI; pipe the chat to see llama.cpp's log")
            verbose = False

        loading = " and ".join(p.name for p in (choice.target, choice.draft) if p is not None)
        app = SpecrunApp(loader=load, loading=loading, system=system, max_tokens=max_tokens)
        try:
            with interrupts.routed_to(app.exit) as received:
                app.run()
        finally:
            if app.engine is not None:
                app.engine.close()
        if received:
            raise typer.Exit(128 + received[0])
        return

    engine = load()
    load_notes(engine.target, requested_ctx=ctx, requested_threads=threads)  # not in the TUI: it would garble the screen
    try:
        _chat_through_pipe(engine, system=system, max_tokens=max_tokens, stats=stats)
    except KeyboardInterrupt as stop:
        sys.stdout.flush()
        note("interrupted")
        raise typer.Exit(exit_status(stop))
    finally:
        engine.close()


app.command("chat")(chat)


def _chat_through_pipe(engine: "Engine", *, system: str | None, max_tokens: int, stats: bool) -> None:
    from specrun.chat import Conversation
    from specrun.speculative import Round
    from specrun.stats import Stats
    from specrun.textio import stdin_lines

    conversation = Conversation(engine.target, system=system)
    for line in stdin_lines():
        user_text = line.rstrip("\r\n")
        if not user_text.strip():
            continue
        figures = Stats()
        turn = conversation.ask(engine, user_text, max_tokens=max_tokens)
        if turn.dropped:
            note(turn.dropped_notice)
        ends_with_newline = True  # an empty answer still gets its blank line
        for event in turn.events:
            figures.add(event)
            if isinstance(event, Round) and event.text:
                sys.stdout.write(event.text)
                sys.stdout.flush()
                ends_with_newline = event.text.endswith("\n")
        sys.stdout.write("\n" if ends_with_newline else "\n\n")
        sys.stdout.flush()
        if stats:
            for summary_line in figures.summary_lines(extra=[("threads", str(engine.target.threads)),
                                                            placement_row(engine.placement())]):
                print(summary_line, file=sys.stderr)
            sys.stderr.flush()
