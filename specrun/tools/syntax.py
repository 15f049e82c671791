"""What every tool-call syntax says of itself: how a chat template shows it is the one, where
an answer's calls begin, how to read them back, how to write earlier calls for a template
that cannot, and the grammar of a forced call. One subclass per syntax, in its family's
module; `formats.py` is their table."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

from specrun.tools.calls import Tool, ToolCall
from specrun.tools.gbnf import Rules

ToolFormat = Literal[
    "hermes",
    "llama3",
    "mistral",
    "glm",
    "qwen3-coder",
    "harmony",
    "deepseek-r1",
    "deepseek-v3.1",
    "kimi-k2",
    "generic",
]


class Syntax(ABC):
    """One tool-call syntax."""

    name: ClassVar[ToolFormat]
    starts: ClassVar[tuple[str, ...]]  # what opens an answer's calls: the text before is text
    # Its marks that models hold as control tokens, whose text the answer must keep for its
    # calls to be read (llama-server's "preserved tokens"); others render as they are.
    kept: ClassVar[tuple[str, ...]] = ()
    example: ClassVar[str]  # a call as a system message shows it (`system_text`)

    @abstractmethod
    def detects(self, template: str) -> bool:
        """Whether a chat template writes calls in this syntax."""

    @abstractmethod
    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        """The calls in `calls` (an answer's text from where they start); None where it is not
        calls of this syntax. A call of a function not in `tools` is read all the same: the
        caller decides (`parse_calls`)."""

    @abstractmethod
    def write(self, calls: Sequence[ToolCall]) -> str:
        """A turn's calls as the model writes them, for a template that does not render them."""

    @abstractmethod
    def call_rule(self, tool: Tool, rules: Rules) -> str:
        """GBNF of one call of `tool` (its name, and arguments its schema allows)."""

    @abstractmethod
    def root(self, several: bool, rules: Rules) -> str:
        """GBNF of a forced answer around the rule `call` (any offered tool's call): one call,
        or with `several`, one or more (rules it needs added to `rules`)."""

    def start(self, text: str) -> int:
        """Where the answer's calls begin; -1 where none does (yet)."""
        found = [at for at in (text.find(s) for s in self.starts) if at >= 0]
        return min(found, default=-1)

    def held(self, text: str, sent: int) -> int:
        """How much of `text` may go out while it streams: all up to where a call starts, or
        may be starting (a start's beginning, at the end)."""
        at = self.start(text)
        if at >= 0:
            return at
        for size in range(min(max(map(len, self.starts)) - 1, len(text)), 0, -1):
            if any(s.startswith(text[-size:]) for s in self.starts):
                return len(text) - size
        return len(text)


def json_arguments(text: str) -> dict[str, object] | None:
    """JSON text of an arguments object, or None where it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
