"""Screens: loading the models, the chat itself, and the help overlay."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, LoadingIndicator, Static

from specrun.core.loop import Prefill, Round
from specrun.core.stats import Stats
from specrun.errors import SpecrunError
from specrun_tui.commands import (
    COMMAND_HELP,
    Clear,
    Command,
    SetGamma,
    SetMaxTokens,
    SetSampling,
    SetSystem,
    ShowHelp,
    ShowStats,
    parse_command,
)
from specrun_tui.engine_process import EngineProcess
from specrun_tui.generation import Generation
from specrun_tui.messages import Ask, EndAnswer, Ended, Finished, Loaded, Refused, Reply, Started
from specrun_tui.widgets import Answer, FiguresPanel, ModelBar, Transcript

FIGURES_SECONDS = 1.0  # nobody reads the figures faster; text comes as the app receives it

FINISH_NOTICES = {
    "cancelled": "stopped",
    "length": "stopped at the token limit (/set max_tokens N raises it)",
    "context": "stopped: the context is full (/clear starts over)",
}

KEYS = [
    ("Enter", "send the message or command"),
    ("Escape", "stop the answer being generated"),
    ("ctrl+c", "stop the answer too; with none under way, twice quits"),
    ("ctrl+o", "colour the tokens that came from accepted drafts"),
    ("F1", "this help"),
    ("ctrl+q", "quit"),
]


class LoadingScreen(Screen[None]):
    """Shown while the engine process loads the models."""

    def __init__(self, description: str) -> None:
        super().__init__()
        self.description = description

    def compose(self) -> ComposeResult:
        with Vertical(id="loading"):
            yield LoadingIndicator()
            yield Label(f"Loading {self.description}…", id="loading-status")

    def show_error(self, error: str) -> None:
        self.query_one(LoadingIndicator).remove()
        self.query_one("#loading-status", Label).update(
            Text.assemble((f"specrun: error: {error}", "bold red"), "\nctrl+q quits")
        )


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Static(Text("specrun chat", style="bold"), classes="help-title")
            yield Static(_table("Keys", KEYS))
            yield Static(_table("Commands", COMMAND_HELP))
            yield Static(Text("Escape closes this help", style="dim"))


def _table(title: str, rows: list[tuple[str, str]]) -> Text:
    width = max(len(name) for name, _ in rows) + 2
    text = Text()
    text.append(f"{title}\n", style="bold")
    for name, meaning in rows:
        text.append(f"  {name:<{width}}", style="bold")
        text.append(f"{meaning}\n")
    return text


class ChatScreen(Screen[None]):
    """The conversation: transcript, figures panel and input box.

    The engine process answers; the app hands this screen what it sent (`receive`),
    a batch a few times a second, and Escape asks the engine to stop.
    """

    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+o", "toggle_origin", "Draft colours"),
        Binding("f1", "help", "Help"),
    ]

    def __init__(self, engine: EngineProcess, loaded: Loaded, *, max_tokens: int = 256) -> None:
        super().__init__()
        self.engine = engine
        self.loaded = loaded
        self.max_tokens = max_tokens
        self.show_origin = False
        self.generation: Generation | None = None  # from the Ask until Finished or Refused
        self.answer: Answer | None = None  # from Started
        self.last_stats: Stats | None = None
        self._figures_drawn = 0.0  # monotonic time of the panel's last redraw
        self._blink = True  # the input's cursor blink, put back after an answer

    def compose(self) -> ComposeResult:
        yield ModelBar(self.loaded.summary, markup=False)
        with Horizontal():
            yield Transcript()
            yield FiguresPanel(self.loaded.policy)
        yield Input(placeholder="Message, or /help")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def panel(self) -> FiguresPanel:
        return self.query_one(FiguresPanel)

    @property
    def generating(self) -> bool:
        return self.generation is not None

    # --- input ----------------------------------------------------------------------------

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.clear()
        if text.startswith("/"):
            self.run_command(text)
        elif text:
            self.send(text)

    def send(self, text: str) -> None:
        """Ask the engine process to answer `text`."""
        if self.generation is not None:
            self.notify("Still answering: Escape or Ctrl-C stops it.", severity="warning")
            return
        self.transcript.add_user(text)
        try:
            self.engine.send(Ask(text, self.max_tokens))
        except SpecrunError as error:  # the engine process is gone
            self.transcript.add_notice(str(error), error=True)
            return
        self.generation = Generation()
        # Each blink repaints the screen: CPU that llama.cpp's threads want.
        self._blink, self.query_one(Input).cursor_blink = self.query_one(Input).cursor_blink, False

    # --- what the engine sent -------------------------------------------------------------

    def receive(self, replies: list[Reply]) -> None:
        """Show what the engine process sent since the last call (oldest first)."""
        events: list[Prefill | Round] = []
        for reply in replies:
            if isinstance(reply, (Prefill, Round)):
                events.append(reply)
                continue
            self._show(events)
            events = []
            if isinstance(reply, Started):
                if reply.dropped_notice:
                    self.transcript.add_notice(reply.dropped_notice)
                self.answer = self.transcript.start_answer(show_origin=self.show_origin)
            elif isinstance(reply, Refused):
                self.transcript.add_notice(reply.error, error=True)
                self.generation = None
            elif isinstance(reply, (Finished, Ended)):
                self._finish(reply.error)
        self._show(events)

    def _show(self, events: list[Prefill | Round]) -> None:
        if self.generation is None or not events:
            return
        segments, readings = self.generation.add(events, self.engine.policy)
        if segments and self.answer is not None:
            self.answer.append(segments)
        self.panel.add(readings)
        # In the same repaint as the text: one pass of the compositor, not two.
        if time.monotonic() - self._figures_drawn >= FIGURES_SECONDS:
            self._figures_drawn = time.monotonic()
            self.panel.redraw()

    def _finish(self, error: str | None) -> None:
        generation = self.generation
        if generation is None:  # the engine ended between answers
            if error:
                self.transcript.add_notice(error, error=True)
            return
        self.panel.redraw()
        if self.answer is not None:
            self.answer.finish()
        self.last_stats = generation.stats
        if error:
            self.transcript.add_notice(error, error=True)
        elif generation.finish_reason in FINISH_NOTICES:
            self.transcript.add_notice(FINISH_NOTICES[generation.finish_reason])
        self.generation = self.answer = None  # ready for the next message
        self.query_one(Input).cursor_blink = self._blink

    # --- keys -----------------------------------------------------------------------------

    def action_stop(self) -> None:
        if self.generation is not None:
            self.engine.send(EndAnswer())

    def action_toggle_origin(self) -> None:
        self.show_origin = not self.show_origin
        self.transcript.set_show_origin(self.show_origin)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    # --- slash commands -------------------------------------------------------------------

    def run_command(self, line: str) -> None:
        try:
            self.apply(parse_command(line))
        except SpecrunError as error:
            self.transcript.add_notice(str(error), error=True)

    def apply(self, command: Command) -> None:
        if isinstance(command, Clear):
            if self.generation is not None:
                raise SpecrunError("/clear: stop the answer first (Escape)")
            self.engine.send(command)
            self.transcript.clear()
            self.panel.reset()
            self.last_stats = None
            self.notify("Conversation cleared.")
        elif isinstance(command, SetSystem):
            self.engine.send(command)
            self.notify(
                f"System prompt: {command.text}" if command.text else "System prompt removed."
            )
        elif isinstance(command, SetSampling):
            self.engine.send(command)
            self.notify(str(command))
        elif isinstance(command, SetMaxTokens):
            self.max_tokens = command.value
            self.notify(f"max_tokens = {command.value}")
        elif isinstance(command, SetGamma):
            self.engine.send(command)
            self.panel.show_policy(self.engine.policy)
            self.notify(f"γ policy: {self.engine.policy}")
        elif isinstance(command, ShowStats):
            if self.last_stats is None:
                raise SpecrunError("/stats: no answer yet")
            self.transcript.add_notice("\n".join(self.last_stats.summary_lines()))
        elif isinstance(command, ShowHelp):
            self.action_help()
