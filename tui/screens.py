"""Screens: loading the models, the chat itself, and the help overlay."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, LoadingIndicator, Static

from specrun.chat import Conversation
from specrun.errors import SpecrunError
from specrun.stats import Stats
from specrun_tui.commands import (
    COMMAND_HELP, Clear, Command, SetGamma, SetMaxTokens, SetSampling, SetSystem, ShowHelp, ShowStats,
    parse_command,
)
from specrun_tui.generation import Generation
from specrun_tui.messages import GenerationFinished
from specrun_tui.widgets import AssistantMessage, FiguresPanel, ModelBar, Transcript, engine_summary

if TYPE_CHECKING:
    from specrun.engine import Engine
    from specrun.speculative import Event

# How often streamed text and the figures reach the screen. Each refresh that moves
# the transcript repaints the screen (~15 ms of Python holding the GIL, on a core
# llama.cpp's threads want), so text comes in 5 batches a second, and the figures,
# which nobody reads faster, once a second.
TEXT_SECONDS = 1 / 5
FIGURES_SECONDS = 1.0

FINISH_NOTICES = {
    "cancelled": "stopped",
    "length": "stopped at the token limit (/set max_tokens N raises it)",
    "context": "stopped: the context is full (/clear starts over)",
}

KEYS = [
    ("Enter", "send the message or command"),
    ("Escape", "stop the answer being generated"),
    ("ctrl+o", "colour the tokens that came from accepted drafts"),
    ("F1", "this help"),
    ("ctrl+q", "quit"),
]


class LoadingScreen(Screen[None]):
    """Shown while Engine.load runs in a worker thread."""

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

    A generation runs in a worker thread (Generation); a timer moves what it produced
    into the widgets at a bounded rate, and Escape sets the flag the loop polls.
    """

    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+o", "toggle_origin", "Draft colours"),
        Binding("f1", "help", "Help"),
    ]

    def __init__(self, engine: "Engine", *, system: str | None = None, max_tokens: int = 256) -> None:
        super().__init__()
        self.engine = engine
        self.conversation = Conversation(engine.target, system=system)
        self.max_tokens = max_tokens
        self.show_origin = False
        self.generation: Generation | None = None
        self.answer: AssistantMessage | None = None
        self.last_stats: Stats | None = None

    def compose(self) -> ComposeResult:
        yield ModelBar(engine_summary(self.engine), markup=False)
        with Horizontal():
            yield Transcript()
            yield FiguresPanel(self.engine.policy.name)
        yield Input(placeholder="Message, or /help")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(TEXT_SECONDS, self.refresh_answer)
        self.set_interval(FIGURES_SECONDS, self.panel.redraw)
        self.query_one(Input).focus()

    def on_unmount(self) -> None:
        if self.generation is not None:
            self.generation.stop_and_wait()  # the worker must leave llama.cpp before the models close

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
            await self.send(text)

    async def send(self, text: str) -> None:
        """Start answering `text` in a worker thread."""
        if self.generation is not None:
            self.notify("Still answering: Escape stops it.", severity="warning")
            return
        self.transcript.add_user(text)
        generation = Generation()
        try:
            turn = self.conversation.ask(self.engine, text, max_tokens=self.max_tokens,
                                         cancelled=generation.stop_requested)
        except SpecrunError as error:
            self.transcript.add_notice(str(error), error=True)
            return
        if turn.dropped:
            self.transcript.add_notice(turn.dropped_notice)
        self.generation = generation
        self.answer = await self.transcript.start_answer(show_origin=self.show_origin)
        self._generate(generation, turn.events)

    @work(thread=True, group="generation")
    def _generate(self, generation: Generation, events: Iterator["Event"]) -> None:
        generation.consume(events)
        self.post_message(GenerationFinished(generation))

    def refresh_answer(self) -> None:
        """Move what the worker produced since the last call into the widgets."""
        if self.generation is None or self.answer is None:
            return
        segments, readings = self.generation.take(self.engine.policy.name)
        if segments:
            self.answer.append(segments)
            self.transcript.follow()
        self.panel.add(readings)

    async def on_generation_finished(self, message: GenerationFinished) -> None:
        self.refresh_answer()
        self.panel.redraw()
        generation = message.generation
        if self.answer is not None:
            await self.answer.finish()
        self.last_stats = generation.stats
        if generation.error:
            self.transcript.add_notice(generation.error, error=True)
        elif generation.finish_reason in FINISH_NOTICES:
            self.transcript.add_notice(FINISH_NOTICES[generation.finish_reason])
        self.generation = self.answer = None  # ready for the next message

    # --- keys -----------------------------------------------------------------------------

    def action_stop(self) -> None:
        if self.generation is not None:
            self.generation.stop()

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
            self.conversation.clear()
            self.transcript.remove_children()
            self.panel.reset()
            self.last_stats = None
            self.notify("Conversation cleared.")
        elif isinstance(command, SetSystem):
            self.conversation.system = command.text
            self.notify(f"System prompt: {command.text}" if command.text else "System prompt removed.")
        elif isinstance(command, SetSampling):
            self.engine.set_params(**{command.field: command.value})
            self.notify(f"{command.field} = {command.value}")
        elif isinstance(command, SetMaxTokens):
            self.max_tokens = command.value
            self.notify(f"max_tokens = {command.value}")
        elif isinstance(command, SetGamma):
            self.engine.set_gamma(command.spec)
            self.panel.show_policy(self.engine.policy.name)
            self.notify(f"γ policy: {self.engine.policy.name}")
        elif isinstance(command, ShowStats):
            if self.last_stats is None:
                raise SpecrunError("/stats: no answer yet")
            self.transcript.add_notice("\n".join(self.last_stats.summary_lines()))
        elif isinstance(command, ShowHelp):
            self.action_help()
