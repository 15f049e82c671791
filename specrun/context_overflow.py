"""A conversation longer than the context: what `chat` and `serve` do with it
(`--context-overflow`).

`truncate` (the default, as Ollama does): the oldest exchanges are dropped, whole, until the
rendered conversation leaves the answer its room; the system messages and the last exchange
(the message being answered) always stay. An exchange runs from a user message to the next
one, so what is left still alternates as templates expect. What is generated then is plain
decoding of the shortened conversation. `error` (as llama-server does): the conversation is
refused, with its length and the context's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, get_args

from specrun.errors import SpecrunError

if TYPE_CHECKING:  # the command line reads `Overflow` without loading llama.cpp
    from specrun.prompt import Message

Overflow = Literal["truncate", "error"]
OVERFLOWS: tuple[Overflow, ...] = get_args(Overflow)


class ContextOverflow(SpecrunError):
    """The conversation does not fit, as the policy found it: `tokens` long, `limit` at most."""

    def __init__(self, message: str, tokens: int, limit: int) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


def answer_room(n_ctx: int, max_tokens: int | None) -> int:
    """The tokens a conversation leaves for the answer before exchanges are dropped:
    `max_tokens`, but at most a quarter of the context (an answer of `max_tokens` that does
    not fit ends at the context's end, as any answer does)."""
    quarter = max(n_ctx // 4, 1)
    return quarter if max_tokens is None else max(min(max_tokens, quarter), 1)


def fit(
    messages: Sequence[Message],
    render: Callable[[list[Message]], list[int]],
    limit: int,
    policy: Overflow,
) -> tuple[list[Message], list[int], int]:
    """The messages that render in at most `limit` tokens by `policy`, their tokens, and how
    many exchanges were dropped; ContextOverflow where none do."""
    kept = list(messages)
    tokens = render(kept)
    dropped = 0
    while len(tokens) > limit:
        shorter = _without_oldest_exchange(kept) if policy == "truncate" else None
        if shorter is None:
            raise ContextOverflow(_refusal(len(tokens), limit, policy, dropped), len(tokens), limit)
        kept = shorter
        tokens = render(kept)
        dropped += 1
    return kept, tokens, dropped


def _without_oldest_exchange(messages: list[Message]) -> list[Message] | None:
    """The messages but the oldest exchange (the system messages stay); None where the last
    exchange is all that is left."""
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    if len(starts) < 2:
        return None
    dropped = range(0, starts[1])  # what comes before the second user message
    return [m for i, m in enumerate(messages) if i not in dropped or m.role == "system"]


def _refusal(tokens: int, limit: int, policy: Overflow, dropped: int) -> str:
    what = "the last message" if policy == "truncate" else "the conversation"
    after = f" (after dropping {dropped} older exchanges)" if dropped else ""
    return (
        f"{what} is {tokens} tokens{after}, more than the {limit} the context leaves it "
        "beside the answer's room"
    )
