"""Screens: loading the models, the chat itself, and the help overlay."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Label, LoadingIndicator, Static

from specrun.core.loop import Prefill, Round
from specrun.core.stats import Stats
from specrun.errors import SpecrunError
from specrun_tui.commands import (
    COMMAND_HELP,
    Clear,
    Command,
    LoadConversation,
    Retry,
    SaveConversation,
    SetGamma,
    SetMaxTokens,
    SetSampling,
    SetSystem,
    ShowHelp,
    ShowStats,
    SwitchDraft,
    parse_command,
)
from specrun_tui.engine_process import EngineProcess
from specrun_tui.generation import Generation, summary_line
from specrun_tui.messages import (
    Ask,
    AskAgain,
    ConversationLoaded,
    DraftSwitched,
    EndAnswer,
    Ended,
    Finished,
    Loaded,
    Refused,
    Reply,
    Said,
    Started,
)
from specrun_tui.widgets import Answer, FiguresPanel, MessageBox, ModelBar, Transcript

FIGURES_SECONDS = 1.0  # nobody reads the figures faster; text comes as the app receives it

FINISH_NOTICES = {
    "cancelled": "stopped",
    "length": "stopped at the token limit (/set max_tokens N raises it)",
    "context": "stopped: the context is full (/clear starts over)",
}

KEYS = [
    ("Enter", "send the message or command"),
    ("shift+enter", "a new line, in terminals with kitty's key protocol"),
    ("ctrl+j", "a new line, in every terminal"),
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
        self.again = False  # the answer under way replaces the last one (/retry)
        self.busy: str | None = None  # a command the engine is carrying out (/draft, /load)
        self._figures_drawn = 0.0  # monotonic time of the panel's last redraw
        self._blink = True  # the input's cursor blink, put back after an answer

    def compose(self) -> ComposeResult:
        yield ModelBar(self.loaded.summary, markup=False)
        with Horizontal():
            yield Transcript()
            yield FiguresPanel(self.loaded.policy)
        yield MessageBox(placeholder="Message, or /help (ctrl+j: new line)")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(MessageBox).focus()
        if self.loaded.resumed is not None:
            self._restore(self.loaded.resumed)

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

    async def on_message_box_submitted(self, event: MessageBox.Submitted) -> None:
        text = event.value.strip()
        if text.startswith("/"):
            event.box.clear()
            self.run_command(text)
        elif text and self.ready():
            event.box.clear()
            self.send(text)

    def ready(self) -> bool:
        """Whether the engine is free for a message; if not, say why (the box keeps it)."""
        if self.generation is not None:
            self.notify("Still answering: Escape or Ctrl-C stops it.", severity="warning")
        elif self.busy is not None:
            self.notify(f"Still on {self.busy}.", severity="warning")
        return self.generation is None and self.busy is None

    def send(self, text: str) -> None:
        """Ask the engine process to answer `text`."""
        self.transcript.add_user(text)
        self._ask(Ask(text, self.max_tokens))

    def _ask(self, ask: Ask | AskAgain) -> None:
        try:
            self.engine.send(ask)
        except SpecrunError as error:  # the engine process is gone
            self.transcript.add_notice(str(error), error=True)
            return
        self.generation = Generation()
        self.again = isinstance(ask, AskAgain)
        # Each blink repaints the screen: CPU that llama.cpp's threads want.
        box = self.query_one(MessageBox)
        self._blink, box.cursor_blink = box.cursor_blink, False

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
                if self.again:
                    self.transcript.drop_last_answer()
                if reply.dropped_notice:
                    self.transcript.add_notice(reply.dropped_notice)
                self.answer = self.transcript.start_answer(show_origin=self.show_origin)
            elif isinstance(reply, Refused):
                self.transcript.add_notice(reply.error, error=True)
                self.generation = None
                self.query_one(MessageBox).cursor_blink = self._blink
            elif isinstance(reply, (Finished, Ended)):
                self.busy = None
                self._finish(reply.error)
            elif isinstance(reply, DraftSwitched):
                self._switched(reply)
            elif isinstance(reply, ConversationLoaded):
                self._restore(reply)
            elif isinstance(reply, Said):
                self.busy = None
                self.transcript.add_notice(reply.text, error=reply.error)
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
        if self.answer is not None:
            self.transcript.add_summary(summary_line(generation.stats, self.engine.draft))
        if error:
            self.transcript.add_notice(error, error=True)
        elif generation.finish_reason in FINISH_NOTICES:
            self.transcript.add_notice(FINISH_NOTICES[generation.finish_reason])
        self.generation = self.answer = None  # ready for the next message
        self.query_one(MessageBox).cursor_blink = self._blink

    def _switched(self, reply: DraftSwitched) -> None:
        self.busy = None
        self.query_one(ModelBar).update(reply.loaded.summary)
        self.panel.show_policy(reply.loaded.policy)
        if reply.refusal:
            self.transcript.add_notice(f"/draft: {reply.refusal}", error=True)
        else:
            self.transcript.add_notice(
                f"draft {reply.loaded.draft}, γ policy {reply.loaded.policy}"
                if reply.loaded.draft != "none"
                else "no draft: plain decoding"
            )

    def _restore(self, reply: ConversationLoaded) -> None:
        """The transcript of a conversation loaded from a file, in place of the old one."""
        self.busy = None
        self.transcript.clear()
        self.panel.reset()
        self.last_stats = None
        for message in reply.turns:
            if message.role == "user":
                self.transcript.add_user(message.content)
            elif message.role == "assistant":
                self.transcript.add_answer(message.content)
        self.transcript.add_notice(reply.note)

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
        except SpecrunError as error:  # one line, naming the command
            name = line.split(maxsplit=1)[0]
            said = str(error) if "/" in str(error) else f"{name}: {error}"
            self.transcript.add_notice(said, error=True)

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
            self.transcript.add_notice(
                f"system prompt: {command.text}" if command.text else "system prompt removed"
            )
        elif isinstance(command, SetSampling):
            self.engine.send(command)
            self.transcript.add_notice(f"set {command}")
        elif isinstance(command, SetMaxTokens):
            self.max_tokens = command.value
            self.transcript.add_notice(f"set max_tokens = {command.value}")
        elif isinstance(command, SetGamma):
            self.engine.send(command)
            self.panel.show_policy(self.engine.policy)
            self.transcript.add_notice(f"set γ policy = {self.engine.policy}")
        elif isinstance(command, Retry):
            if self.ready():
                self._ask(AskAgain(self.max_tokens))
        elif isinstance(command, SwitchDraft | SaveConversation | LoadConversation):
            self._carry_out(command)
        elif isinstance(command, ShowStats):
            if self.last_stats is None:
                raise SpecrunError("/stats: no answer yet")
            self.transcript.add_notice("\n".join(self.last_stats.summary_lines()))
        elif isinstance(command, ShowHelp):
            self.action_help()

    def _carry_out(self, command: SwitchDraft | SaveConversation | LoadConversation) -> None:
        """A command the engine process carries out between answers, saying when it is done."""
        if not self.ready():
            return
        self.engine.send(command)
        if isinstance(command, SwitchDraft):
            self.busy = f"/draft {command.spec}"
            self.transcript.add_notice(f"loading the draft {command.spec}…")
        else:
            self.busy = "/save" if isinstance(command, SaveConversation) else "/load"
