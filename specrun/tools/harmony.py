"""gpt-oss's Harmony: an answer is messages in channels (`analysis` for thinking, `final` for
the answer), and a call is a message to a recipient, `to=functions.NAME`, named in the role's
header or the channel's, with JSON arguments; `<|call|>` ends it, and with it the generation:
one call per answer (the client sends its result, and the model calls again)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

from specrun.tools.calls import Tool, ToolCall
from specrun.tools.gbnf import Rules, literal
from specrun.tools.syntax import Syntax, ToolFormat, json_arguments

_ROLES = ("<|start|>assistant", "")
_CHANNELS = ("<|channel|>commentary", "<|channel|>analysis", "")


class Harmony(Syntax):
    name: ClassVar[ToolFormat] = "harmony"
    starts = tuple(f"{role}{channel} to=functions." for role in _ROLES for channel in _CHANNELS)
    example = (
        "<|start|>assistant<|channel|>commentary to=functions.<function-name> "
        "<|constrain|>json<|message|><arguments-object><|call|>"
    )
    _CALL = re.compile(
        r"(?:<\|start\|>assistant)?(?:<\|channel\|>\s*\w+)?\s*to=functions\.([A-Za-z0-9_-]+)"
        r"\s*(?:<\|channel\|>\s*\w+)?\s*(?:<\|constrain\|>)?\s*[\w-]*\s*<\|message\|>"
        r"(.*?)(?:<\|call\|>|$)",
        re.DOTALL,
    )

    def detects(self, template: str) -> bool:
        return "<|channel|>" in template

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        match = self._CALL.match(calls)
        arguments = json_arguments(match[2].strip()) if match else None
        if match is None or arguments is None:
            return None
        return [ToolCall.made(match[1], arguments)]

    def write(self, calls: Sequence[ToolCall]) -> str:
        return "".join(
            f"<|start|>assistant<|channel|>commentary to=functions.{call.name} <|constrain|>json"
            f"<|message|>{json.dumps(call.values)}<|call|>"
            for call in calls
        )

    def call_rule(self, tool: Tool, rules: Rules) -> str:
        header = literal(
            f"<|channel|>commentary to=functions.{tool.name} <|constrain|>json<|message|>"
        )
        return f"{header} {rules.json(tool.schema)}"

    def root(self, several: bool, rules: Rules) -> str:
        """The call at once, as every syntax's forced call (no thinking first); one, with or
        without `several`, since `<|call|>` ends the answer."""
        return "call"
