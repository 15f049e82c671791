"""Conversations: the turns of a chat, each rendered whole through `specrun.prompt`.

Both models' KV caches keep the prefix a turn shares with the last one, so each turn
evaluates only what is new.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specrun.core.loop import Event, Round
from specrun.errors import SpecrunError
from specrun.llama.model import Model
from specrun.prompt import Message, render

if TYPE_CHECKING:
    from specrun.engine import Engine


@dataclass
class Conversation:
    """A multi-turn chat. Both models' KV caches keep the shared prefix between turns,
    so each turn evaluates only what is new."""

    model: Model
    system: str | None = None
    turns: list[Message] = field(default_factory=list)
    dropped_turns: int = 0  # user/assistant pairs dropped to fit the context

    def messages(self) -> list[Message]:
        return ([Message("system", self.system)] if self.system else []) + self.turns

    def prompt_for(self, user_text: str, reserve: int) -> list[int]:
        """Add a user turn and render the conversation, dropping the oldest exchanges
        (never the system prompt) until it leaves `reserve` tokens for the answer."""
        self.turns.append(Message("user", user_text))
        while True:
            tokens = render(self.model, self.messages())
            if len(tokens) + reserve <= self.model.n_ctx:
                return tokens
            if len(self.turns) <= 1:
                self.turns.pop()
                raise SpecrunError(
                    f"the message is {len(tokens)} tokens; with {reserve} reserved for the answer "
                    f"it does not fit the context ({self.model.n_ctx}); "
                    "use a larger `n_ctx` or a smaller `max_tokens`"
                )
            del self.turns[:2]
            self.dropped_turns += 1

    def add_reply(self, text: str) -> None:
        self.turns.append(Message("assistant", text))

    def ask(
        self,
        engine: Engine,
        user_text: str,
        *,
        max_tokens: int,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Turn:
        """Add the user's turn and stream the answer; the reply (a stopped one too) joins
        the conversation when the events run out. Every turn renders the whole
        conversation: both caches keep the prefix it shares with the last turn."""
        dropped_before = self.dropped_turns
        tokens = self.prompt_for(user_text, reserve=max_tokens)
        events = self._stream_reply(engine, tokens, max_tokens, cancelled)
        return Turn(self.dropped_turns - dropped_before, events)

    def _stream_reply(
        self, engine: Engine, tokens: list[int], max_tokens: int, cancelled: Callable[[], bool]
    ) -> Iterator[Event]:
        reply: list[str] = []
        try:
            for event in engine.stream(tokens, max_tokens=max_tokens, cancelled=cancelled):
                if isinstance(event, Round):
                    reply.append(event.text)
                yield event
        except BaseException:
            self.turns.pop()  # no answer: drop the question too, so roles still alternate
            raise
        self.add_reply("".join(reply))

    def clear(self) -> None:
        self.turns.clear()
        self.dropped_turns = 0


@dataclass
class Turn:
    """One exchange: the answer's events, and how many old exchanges were dropped to fit it."""

    dropped: int
    events: Iterator[Event]

    @property
    def dropped_notice(self) -> str:
        exchanges = "exchange" if self.dropped == 1 else "exchanges"
        return f"dropped the {self.dropped} oldest {exchanges} to fit the context"
