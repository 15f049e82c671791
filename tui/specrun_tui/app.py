"""The Textual app: a loading screen until the engine process has loaded, then the chat."""

from __future__ import annotations

import select
import sys

from textual.app import App
from textual.binding import Binding

from specrun_tui.commands import SetSystem
from specrun_tui.engine_process import EngineProcess
from specrun_tui.messages import Ended, Loaded, LoadFailed
from specrun_tui.screens import ChatScreen, LoadingScreen
from specrun_tui.widgets import MessageBox

# How often the app reads what the engine process sent. Each read that brings text
# repaints the screen, a few milliseconds of CPU taken from llama.cpp's threads, so
# text comes in 5 batches a second (the figures are redrawn once a second).
RECEIVE_SECONDS = 1 / 5
HANGUP_STATUS = 128 + 1  # 128 + SIGHUP, 1 wherever it exists (Windows has none)
QUIT_ASK_SECONDS = 3.0  # how long a first Ctrl-C with no answer under way waits for a second


class SpecrunApp(App[None]):
    """Chat with a speculative engine that runs in its own process (EngineProcess).

    Whoever made the engine process closes it, after `run()`.
    """

    CSS_PATH = "specrun.tcss"
    TITLE = "specrun"
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),  # the default, shown in the footer
        # Before the text box's copy: Ctrl-C stops the answer, as everywhere in specrun.
        Binding("ctrl+c", "interrupt", "Stop", show=False, priority=True),
    ]

    def __init__(
        self,
        engine: EngineProcess,
        *,
        loading: str = "the models",
        system: str | None = None,
        max_tokens: int = 256,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.loading = loading
        self.system = system
        self.max_tokens = max_tokens
        self.chat: ChatScreen | None = None  # once loaded; it takes the replies even under the help
        self._quit_asked = False  # Ctrl-C with no answer under way: the next one quits

    def on_mount(self) -> None:
        self.push_screen(LoadingScreen(self.loading))
        self.set_interval(RECEIVE_SECONDS, self.receive)

    def action_interrupt(self) -> None:
        """Ctrl-C: stop the answer under way; with none, copy the text box's selection, or
        else ask once and quit at the second, as Ctrl-Q does."""
        if self.chat is not None and self.chat.generating:
            self.chat.action_stop()
            return
        focused = self.focused
        if isinstance(focused, MessageBox) and focused.selected_text:
            focused.action_copy()
            return
        if self._quit_asked:
            self.exit()
            return
        self._quit_asked = True
        self.notify("Ctrl-C again quits (so does Ctrl-Q).", timeout=QUIT_ASK_SECONDS)
        self.set_timer(QUIT_ASK_SECONDS, self._forget_quit)

    def _forget_quit(self) -> None:
        self._quit_asked = False

    def receive(self) -> None:
        """Take what the engine process sent; quit if the terminal has gone."""
        if not self.is_headless and _terminal_hung_up():
            # Textual's input thread reads nothing from a closed terminal, again and again.
            self.exit(return_code=HANGUP_STATUS)
            return
        replies = self.engine.receive()
        for reply in replies:
            if isinstance(reply, Loaded):
                if self.system:
                    self.engine.send(SetSystem(self.system))
                self.chat = ChatScreen(self.engine, reply, max_tokens=self.max_tokens)
                self.switch_screen(self.chat)
            elif isinstance(reply, (LoadFailed, Ended)) and isinstance(self.screen, LoadingScreen):
                self.screen.show_error(reply.error)
                self.notify(
                    reply.error, title="Cannot load the models", severity="error", timeout=30
                )
        if self.chat is not None and self.chat.is_mounted:
            self.chat.receive([r for r in replies if not isinstance(r, (Loaded, LoadFailed))])


def _terminal_hung_up() -> bool:
    if sys.__stdin__ is None:
        return False
    poller = select.poll()
    poller.register(sys.__stdin__.fileno(), select.POLLHUP)
    return any(
        events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in poller.poll(0)
    )
