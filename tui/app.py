"""The Textual app: loads the engine (or takes a loaded one) and opens the chat screen."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from textual import work
from textual.app import App
from textual.binding import Binding

from specrun.errors import SpecrunError
from specrun_tui.messages import EngineLoaded, EngineLoadFailed
from specrun_tui.screens import ChatScreen, LoadingScreen

if TYPE_CHECKING:
    from specrun.engine import Engine


class SpecrunApp(App[None]):
    """Chat with a speculative engine.

    Give either a loaded `engine` (tests, library use) or a `loader` that loads one;
    the loader runs in a worker thread behind a loading screen. Whoever made the
    engine closes it: after `run()`, `app.engine` is the loaded one (or None).
    """

    CSS_PATH = "specrun.tcss"
    TITLE = "specrun"
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", priority=True)]  # the default, shown in the footer

    def __init__(
        self,
        engine: "Engine | None" = None,
        *,
        loader: "Callable[[], Engine] | None" = None,
        loading: str = "the models",
        system: str | None = None,
        max_tokens: int = 256,
    ) -> None:
        if (engine is None) == (loader is None):
            raise ValueError("give either an engine or a loader")
        super().__init__()
        self.engine = engine
        self.loader = loader
        self.loading = loading
        self.system = system
        self.max_tokens = max_tokens

    def on_mount(self) -> None:
        if self.engine is not None:
            self.push_screen(self._chat_screen(self.engine))
        else:
            self.push_screen(LoadingScreen(self.loading))
            self._load()

    def _chat_screen(self, engine: "Engine") -> ChatScreen:
        return ChatScreen(engine, system=self.system, max_tokens=self.max_tokens)

    @work(thread=True, exclusive=True)
    def _load(self) -> None:
        assert self.loader is not None
        try:
            engine = self.loader()
        except SpecrunError as error:
            self.post_message(EngineLoadFailed(str(error)))
        else:
            self.post_message(EngineLoaded(engine))

    def on_engine_loaded(self, message: EngineLoaded) -> None:
        self.engine = message.engine
        self.switch_screen(self._chat_screen(message.engine))

    def on_engine_load_failed(self, message: EngineLoadFailed) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.show_error(message.error)
        self.notify(message.error, title="Cannot load the models", severity="error", timeout=30)
