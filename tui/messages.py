"""Messages that worker threads post to the app (Textual's post_message is thread-safe).

Only the ends of long work are messages; the tokens in between are taken by a timer
(see generation.py), so a fast model never floods the message queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from specrun.engine import Engine
    from specrun_tui.generation import Generation


class EngineLoaded(Message):
    def __init__(self, engine: "Engine") -> None:
        super().__init__()
        self.engine = engine


class EngineLoadFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class GenerationFinished(Message):
    """The worker has consumed the last event (or failed); everything is in `generation`."""

    def __init__(self, generation: "Generation") -> None:
        super().__init__()
        self.generation = generation
