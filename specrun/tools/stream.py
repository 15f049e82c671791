"""An answer read for calls as it streams: its text goes out as it comes, but for what may be
(the start of) a call, which is held until the answer ends, and then read as calls or sent as
the text it turned out to be."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from specrun.tools.calls import Tool, ToolCall
from specrun.tools.formats import FORMATS
from specrun.tools.syntax import ToolFormat

LOG = logging.getLogger(__name__)


def parse_calls(text: str, fmt: ToolFormat, tools: Sequence[Tool]) -> tuple[str, list[ToolCall]]:
    """The text before the calls and the calls of an answer; ([text], []) where it makes none,
    where what looks like one does not parse, or where it calls a function that is not among
    `tools` (no client could run it: it is what the model said, as text)."""
    syntax = FORMATS[fmt]
    at = syntax.start(text)
    offered = {tool.name: tool for tool in tools}
    calls = syntax.read(text[at:], offered) if at >= 0 else None
    if not calls or any(call.name not in offered for call in calls):
        return text, []
    return text[:at].strip(), calls


class CallStream:
    """One answer's reader. `most`: the calls it may make (1 where `parallel_tool_calls` is
    false); None for any number."""

    def __init__(self, fmt: ToolFormat, tools: Sequence[Tool], most: int | None = None) -> None:
        self.fmt = fmt
        self.tools = tools
        self.most = most
        self.text = ""
        self.sent = 0  # how much of the text went out

    def feed(self, text: str) -> str:
        """The part of the answer so far that can go out now."""
        self.text += text
        end = max(self.sent, FORMATS[self.fmt].held(self.text, self.sent))
        out, self.sent = self.text[self.sent : end], end
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        """At the answer's end: the text still held, or the calls it holds."""
        _, calls = parse_calls(self.text, self.fmt, self.tools)
        if self.most is not None and len(calls) > self.most:
            # Where a grammar forces the call (tool_choice required or named), it allows `most`
            # calls and no more. Under `auto` nothing constrains the answer (a grammar that let
            # the model choose between text and calls would slow every token of every answer),
            # so a model may write more: as OpenAI's API promises, the answer carries at most
            # `most`, the first; those after it are dropped, and logged.
            LOG.info(
                "dropped %d tool calls after the first %d: parallel_tool_calls is false",
                len(calls) - self.most,
                self.most,
            )
            calls = calls[: self.most]
        return ("", calls) if calls else (self.text[self.sent :], [])
