"""Conversations: the turns of a chat, each rendered whole through `specrun.prompt`.

Both models' KV caches keep the prefix a turn shares with the last one, so each turn
evaluates only what is new.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from specrun.context_overflow import ContextOverflow, Overflow, answer_room, fit
from specrun.core.loop import Event, Round
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
    overflow: Overflow = "truncate"  # what a conversation longer than the context does

    def messages(self) -> list[Message]:
        return ([Message("system", self.system)] if self.system else []) + self.turns

    def prompt_for(self, user_text: str, max_tokens: int) -> list[int]:
        """Add a user turn and render the conversation; where it leaves the answer less than
        its room (`answer_room`), `overflow` drops the oldest exchanges (never the system
        prompt) or refuses it (specrun.context_overflow)."""
        self.turns.append(Message("user", user_text))
        limit = self.model.n_ctx - answer_room(self.model.n_ctx, max_tokens)
        try:
            kept, tokens, dropped = fit(
                self.messages(), partial(render, self.model), limit, self.overflow
            )
        except ContextOverflow as error:
            self.turns.pop()
            raise ContextOverflow(
                f"{error}: use a larger `n_ctx`, a smaller `max_tokens`"
                + (", or the `truncate` overflow" if self.overflow == "error" else ""),
                error.tokens,
                error.limit,
            ) from None
        self.turns = kept[1:] if self.system else kept
        self.dropped_turns += dropped
        return tokens

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
        tokens = self.prompt_for(user_text, max_tokens)
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
