"""Syntaxes whose call is one JSON object of the name and the arguments: Hermes' (Qwen 2.5's
and Qwen3's `<tool_call>{...}</tool_call>`, and the generic one asked of a template that knows
no tools), Llama 3.x's bare `{"name": ..., "parameters": ...}` and Mistral's
`[TOOL_CALLS][{...}, ...]`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from specrun.tools.calls import Tool, ToolCall
from specrun.tools.gbnf import Rules, literal
from specrun.tools.syntax import Syntax, ToolFormat


def _objects(value: Any, *argument_keys: str) -> list[ToolCall] | None:
    """Calls from a parsed object or list of objects with a name and arguments."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        arguments: Any = next((item[key] for key in argument_keys if key in item), {})
        calls.append(ToolCall.made(item["name"], arguments))
    return calls or None


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


class _NamedObject(Syntax):
    """A call as {"name": ..., <key>: arguments}."""

    key: ClassVar[str] = "arguments"

    def call_rule(self, tool: Tool, rules: Rules) -> str:
        return rules.wrapped(
            tool.schema,
            lambda arguments: {
                "type": "object",
                "properties": {"name": {"const": tool.name}, self.key: arguments},
                "required": ["name", self.key],
            },
        )

    def _object(self, call: ToolCall) -> str:
        return json.dumps({"name": call.name, self.key: call.values})


class Hermes(_NamedObject):
    name: ClassVar[ToolFormat] = "hermes"
    starts = ("<tool_call>",)
    example = (
        '<tool_call>\n{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call>'
    )
    _CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

    def detects(self, template: str) -> bool:
        return "<tool_call>" in template

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        found = [_objects(_json(body), "arguments") for body in self._CALL.findall(calls)]
        if not found or None in found:
            return None
        return [call for group in found if group for call in group]

    def write(self, calls: Sequence[ToolCall]) -> str:
        return "\n".join(f"<tool_call>\n{self._object(call)}\n</tool_call>" for call in calls)

    def root(self, several: bool, rules: Rules) -> str:
        one = '"<tool_call>\\n" call "\\n</tool_call>"'
        return f'{rules.add("one", one)} ("\\n" one)*' if several else one


class Generic(Hermes):
    """Hermes' syntax, asked in a system message of a template that knows no tools."""

    name: ClassVar[ToolFormat] = "generic"

    def detects(self, template: str) -> bool:
        return True


class Llama3(_NamedObject):
    name: ClassVar[ToolFormat] = "llama3"
    key = "parameters"
    starts = ("<|python_tag|>", "{")
    example = '{"name": <function-name>, "parameters": <arguments-object>}'
    _TAG = "<|python_tag|>"

    def detects(self, template: str) -> bool:
        return self._TAG in template or "ipython" in template

    def start(self, text: str) -> int:
        """A call is the whole answer: it starts at the start, or nowhere."""
        body = text.lstrip()
        return len(text) - len(body) if body.startswith(("{", self._TAG)) else -1

    def held(self, text: str, sent: int) -> int:
        body = text.lstrip()  # none of it goes out while it may be a call
        maybe = not body or body.startswith(("{", self._TAG)) or self._TAG.startswith(body)
        return sent if maybe else len(text)

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        body = calls.strip().removeprefix(self._TAG).strip()
        if not body.startswith("{"):
            return None
        parts = [
            _objects(_json(p), "parameters", "arguments") for p in re.split(r"\s*;\s*(?=\{)", body)
        ]
        if None in parts:
            return None
        return [call for group in parts if group for call in group]

    def write(self, calls: Sequence[ToolCall]) -> str:
        return "; ".join(self._object(call) for call in calls)

    def root(self, several: bool, rules: Rules) -> str:
        return 'call ("; " call)*' if several else "call"


class Mistral(_NamedObject):
    name: ClassVar[ToolFormat] = "mistral"
    starts = ("[TOOL_CALLS]",)
    example = '[TOOL_CALLS][{"name": <function-name>, "arguments": <arguments-object>}]'

    def detects(self, template: str) -> bool:
        return "[TOOL_CALLS]" in template

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        return _objects(_json(calls.removeprefix("[TOOL_CALLS]").strip()), "arguments")

    def write(self, calls: Sequence[ToolCall]) -> str:
        return "[TOOL_CALLS][" + ", ".join(self._object(call) for call in calls) + "]"

    def root(self, several: bool, rules: Rules) -> str:
        opening, closing = literal("[TOOL_CALLS]["), literal("]")
        return (
            f"{opening} call ({literal(', ')} call)* {closing}"
            if several
            else (f"{opening} call {closing}")
        )
