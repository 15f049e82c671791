"""`specrun chat`: a multi-turn conversation, in the TUI on a terminal, else through a pipe.

Piped, each line on stdin is a user turn and each reply goes to stdout followed by a
blank line, so a shell script can hold a conversation. Every turn renders the whole
conversation; both models' caches keep the prefix they share with the previous turn,
so only the new turn is evaluated.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from specrun.cli.helptext import OUTPUT_PANEL
from specrun.cli.options import (
    DRAFTING,
    LOAD,
    MAX_TOKENS,
    MODELS,
    SAMPLING,
    SYSTEM,
    ModelRequest,
    busy_note,
    load_engine,
    load_notes,
    note,
    placement_row,
    system_prompt,
    takes,
)
from specrun.context_overflow import Overflow
from specrun.core.sampling import SamplingParams
from specrun.options import DraftOptions, LoadOptions
from specrun.system import interrupts
from specrun.system.interrupts import exit_status

if TYPE_CHECKING:
    from collections.abc import Callable

    from specrun.chat import Conversation
    from specrun.engine import Engine


@takes(MODELS, DRAFTING, SAMPLING, LOAD)
def chat(
    system: str | None = SYSTEM,
    max_tokens: int = MAX_TOKENS,
    context_overflow: Overflow = typer.Option(
        "truncate",
        "--context-overflow",
        rich_help_panel=OUTPUT_PANEL,
        help="A conversation longer than the context: truncate drops the oldest exchanges "
        "(the system prompt and the last message stay), and says so; error refuses it.",
    ),
    resume: Path | None = typer.Option(
        None,
        "--resume",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Go on with a saved conversation (the TUI's /save); piped, each answer is saved "
        "back to it.",
    ),
    save: Path | None = typer.Option(
        None,
        "--save",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="Piped: save the conversation to FILE after each answer (resume it with --resume).",
    ),
    stats: bool = typer.Option(
        False,
        "--stats",
        rich_help_panel=OUTPUT_PANEL,
        help="Piped: print each answer's statistics to stderr.",
    ),
    *,
    sampling: SamplingParams,
    drafting: DraftOptions,
    load: LoadOptions,
    models: ModelRequest,
) -> None:
    """Chat with a model: the TUI on a terminal; piped, one user turn per stdin line."""
    from specrun.conversation_file import load_conversation

    saved = load_conversation(resume) if resume is not None else None  # before any download
    system = system_prompt(system)
    choice = models.resolve()

    if sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty():
        from specrun_tui import SpecrunApp
        from specrun_tui.engine_process import EngineProcess

        if load.verbose:  # llama.cpp writes to the terminal directly and would garble the screen
            note("--verbose is ignored in the TUI; pipe the chat to see llama.cpp's log")
            load = replace(load, verbose=False)

        if choice.default_note:  # the TUI's engine process says nothing: here, before it starts
            note(choice.default_note)
        loading = " and ".join(name for name in (choice.target.name, choice.draft_label) if name)
        # The engine runs in a process of its own (see specrun_tui.engine_process), whose
        # output goes nowhere: the placement shows in the TUI's header instead.
        with EngineProcess(
            partial(load_engine, choice, load, params=sampling, drafting=drafting),
            load_draft=partial(_with_draft, models, load, sampling, drafting),
            resume=saved,
            overflow=context_overflow,
        ) as process:
            app = SpecrunApp(process, loading=loading, system=system, max_tokens=max_tokens)
            with interrupts.routed_to(app.exit) as received:
                app.run()
        if received:
            raise typer.Exit(128 + received[0])
        if app.return_code:  # the terminal hung up
            raise typer.Exit(app.return_code)
        return

    engine = None
    try:  # a signal while loading ends the chat as one during a reply does
        engine = load_engine(choice, load, params=sampling, drafting=drafting)
        load_notes(engine.target, load)  # not in the TUI: it would garble the screen
        from specrun.chat import Conversation
        from specrun.conversation_file import resume as resume_conversation

        conversation = Conversation(engine.target, system=system, overflow=context_overflow)
        if saved is not None:
            resume_conversation(conversation, saved)
            conversation.system = system or conversation.system  # --system replaces the file's
        _chat_through_pipe(
            engine, conversation, load, max_tokens=max_tokens, stats=stats, save=save or resume
        )
    except KeyboardInterrupt as stop:
        sys.stdout.flush()
        note("interrupted")
        raise typer.Exit(exit_status(stop)) from None
    finally:
        if engine is not None:
            engine.close()


def _with_draft(
    models: ModelRequest,
    load: LoadOptions,
    sampling: SamplingParams,
    drafting: DraftOptions,
    draft: str,
) -> Callable[[], Engine]:
    """The TUI's `/draft SPEC`: SPEC resolved as `--draft` is (it may download what it names),
    then the loader of the engine with it. It runs in the TUI's engine process."""
    choice = replace(models, draft=draft).resolve()
    return partial(load_engine, choice, load, params=sampling, drafting=drafting)


def _chat_through_pipe(
    engine: Engine,
    conversation: Conversation,
    load: LoadOptions,
    *,
    max_tokens: int,
    stats: bool,
    save: Path | None,
) -> None:
    from specrun.conversation_file import save_conversation
    from specrun.core.loop import Round
    from specrun.core.stats import Stats
    from specrun.system.textio import stdin_lines

    for line in stdin_lines():
        user_text = line.rstrip("\r\n")
        if not user_text.strip():
            continue
        figures = Stats()
        turn = conversation.ask(engine, user_text, max_tokens=max_tokens)
        if turn.dropped:
            note(turn.dropped_notice)
        ends_with_newline = True  # an empty answer still gets its blank line
        try:
            for event in turn.events:
                figures.add(event)
                if isinstance(event, Round) and event.text:
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                    ends_with_newline = event.text.endswith("\n")
        except KeyboardInterrupt:  # the reply so far stays, as a whole line
            if not ends_with_newline:
                sys.stdout.write("\n")
            raise
        sys.stdout.write("\n" if ends_with_newline else "\n\n")
        sys.stdout.flush()
        if save is not None:
            save_conversation(conversation, save)
        if stats:
            for summary_line in figures.summary_lines(
                extra=[("threads", str(engine.target.threads)), placement_row(engine.placement())]
            ):
                print(summary_line, file=sys.stderr)
        busy_note(engine.contention, load)
        sys.stderr.flush()
