"""`specrun chat`: a multi-turn conversation, in the TUI on a terminal, else through a pipe.

Piped, each line on stdin is a user turn and each reply goes to stdout followed by a
blank line, so a shell script can hold a conversation. Every turn renders the whole
conversation; both models' caches keep the prefix they share with the previous turn,
so only the new turn is evaluated.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import typer

from specrun.cli import (
    EXIT_INTERRUPTED,
    CatalogOption,
    DraftOption,
    LookupMaxOption,
    LookupNgramOption,
    LookupOption,
    TargetOption,
    app,
    choose_models,
    load_engine,
    note,
    quiet_stdout,
)

if TYPE_CHECKING:
    from specrun.chat import Conversation
    from specrun.engine import Engine
    from specrun.speculative import Event


@dataclass
class Turn:
    """One exchange: the answer's events, and how many old exchanges were dropped to fit it."""

    dropped: int
    events: Iterator["Event"]


def start_turn(
    engine: "Engine",
    conversation: "Conversation",
    user_text: str,
    *,
    max_tokens: int,
    cancelled: Callable[[], bool] = lambda: False,
) -> Turn:
    """Add the user's turn and stream the answer; the reply (also a stopped one) joins the
    conversation when the events run out. Shared by the piped mode and the TUI."""
    dropped_before = conversation.dropped_turns
    tokens = conversation.prompt_for(user_text, reserve=max_tokens)
    events = _stream_reply(engine, conversation, tokens, max_tokens, cancelled)
    return Turn(conversation.dropped_turns - dropped_before, events)


def _stream_reply(
    engine: "Engine", conversation: "Conversation", tokens: list[int], max_tokens: int,
    cancelled: Callable[[], bool],
) -> Iterator["Event"]:
    from specrun.speculative import Round

    reply: list[str] = []
    try:
        for event in engine.stream(tokens, max_tokens=max_tokens, cancelled=cancelled):
            if isinstance(event, Round):
                reply.append(event.text)
            yield event
    except BaseException:
        # No answer to record: drop the question too, so the next turn's roles still alternate.
        conversation.turns.pop()
        raise
    conversation.add_reply("".join(reply))


def dropped_notice(dropped: int) -> str:
    exchanges = "exchange" if dropped == 1 else "exchanges"
    return f"dropped the {dropped} oldest {exchanges} to fit the context"


def chat(
    target: Optional[str] = TargetOption,
    draft: Optional[str] = DraftOption,
    lookup: bool = LookupOption,
    lookup_ngram: int = LookupNgramOption,
    lookup_max: int = LookupMaxOption,
    catalog: Optional[Path] = CatalogOption,
    system: Optional[str] = typer.Option(None, "--system", "-s", help="System prompt."),
    max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1, help="Most tokens per answer."),
    temp: float = typer.Option(0.8, "--temp", min=0.0, help="Temperature; 0 is greedy."),
    top_k: int = typer.Option(40, "--top-k", min=0, help="Top-k (0 = off)."),
    top_p: float = typer.Option(0.95, "--top-p", min=0.0, max=1.0, help="Top-p (1 = off)."),
    min_p: float = typer.Option(0.05, "--min-p", min=0.0, max=1.0, help="Min-p (0 = off)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for a reproducible sampled run."),
    gamma: str = typer.Option("auto", "--gamma", "-g", help="Draft length: auto, heuristic or a number (0 = no speculation)."),
    gamma_max: int = typer.Option(8, "--gamma-max", min=0, max=32, help="Upper bound of γ for auto/heuristic."),
    p_min: float = typer.Option(0.0, "--p-min", min=0.0, max=1.0, help="Stop drafting when the draft's confidence falls below this."),
    ctx: int = typer.Option(4096, "--ctx", "-c", min=16, help="Context size in tokens."),
    gpu_layers: Optional[int] = typer.Option(None, "--gpu-layers", "-ngl", help="Target layers on the GPU (default: all where supported)."),
    draft_gpu_layers: Optional[int] = typer.Option(None, "--draft-gpu-layers", "-ngld", help="Draft layers on the GPU."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads per model."),
    stats: bool = typer.Option(False, "--stats", help="Piped: print each answer's statistics to stderr."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show llama.cpp's log."),
) -> None:
    """Chat with a model: the TUI on a terminal; piped, one user turn per stdin line."""
    from specrun.sampling import SamplingParams

    params = SamplingParams(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    choice = choose_models(target, draft, catalog)

    def load() -> "Engine":
        return load_engine(choice, ctx=ctx, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers,
                           threads=threads, verbose=verbose, gamma=gamma, gamma_max=gamma_max,
                           p_min=p_min, params=params, lookup=lookup, lookup_ngram=lookup_ngram,
                           lookup_max=lookup_max)

    if sys.stdin.isatty() and sys.stdout.isatty():
        from specrun_tui import SpecrunApp

        loading = " and ".join(p.name for p in (choice.target, choice.draft) if p is not None)
        app = SpecrunApp(loader=load, loading=loading, system=system, max_tokens=max_tokens)
        try:
            app.run()
        finally:
            if app.engine is not None:
                app.engine.close()
        return

    engine = load()
    try:
        _chat_through_pipe(engine, system=system, max_tokens=max_tokens, stats=stats)
    except KeyboardInterrupt:
        sys.stdout.flush()
        note("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        quiet_stdout()  # the reader went away: end quietly
    finally:
        engine.close()


app.command("chat")(chat)


def _chat_through_pipe(engine: "Engine", *, system: str | None, max_tokens: int, stats: bool) -> None:
    from specrun.chat import Conversation
    from specrun.speculative import Round
    from specrun.stats import Stats

    conversation = Conversation(engine.target, system=system)
    for line in sys.stdin:
        user_text = line.rstrip("\r\n")
        if not user_text.strip():
            continue
        figures = Stats()
        turn = start_turn(engine, conversation, user_text, max_tokens=max_tokens)
        if turn.dropped:
            note(dropped_notice(turn.dropped))
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
            for summary_line in figures.summary_lines():
                print(summary_line, file=sys.stderr)
            sys.stderr.flush()
