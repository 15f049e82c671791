"""Syntaxes that write each argument in tags of its own, a string bare and any other value as
JSON: GLM-4.5's and 4.6's (`<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>
\\n</tool_call>`) and Qwen3-Coder's (`<tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n
</parameter>\\n</function>\\n</tool_call>`). Their values are typed back by the tool's schema
(`ToolCall.tagged`); their grammar lets a string be any text but its closing tag."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from specrun.tools.calls import Tool, ToolCall, is_text
from specrun.tools.gbnf import Rules, literal, until
from specrun.tools.syntax import Syntax, ToolFormat

_NAME = r"[A-Za-z0-9_.-]+"


def _written(value: Any) -> str:
    """A value as these templates write it: a string bare, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _tagged_calls(
    pattern: re.Pattern[str], argument: re.Pattern[str], text: str, tools: Mapping[str, Tool]
) -> list[ToolCall] | None:
    """Each match of `pattern` (the name, then the arguments' text) as a call, its arguments
    the matches of `argument` (a key and its value) in that text."""
    calls = []
    for match in pattern.finditer(text):
        tool = tools.get(match[1]) or Tool(match[1])
        calls.append(ToolCall.tagged(tool, argument.findall(match[2])))
    return calls or None


class _Tagged(Syntax):
    """One call's arguments, each in `opening % key`, value, `closing`."""

    opening: ClassVar[str]  # before a value, with %s for its key
    closing: ClassVar[str]  # after it

    def arguments_rule(self, tool: Tool, rules: Rules) -> str:
        # Text up to the closing tag (its newlines aside: a value may hold blank lines).
        text = until(self.closing.strip())
        parts = []
        for key, required in tool.parameters_in_order():
            schema = tool.parameter(key)
            value = text if is_text(schema) else rules.json(schema)
            part = f"{literal(self.opening % key)} {value} {literal(self.closing)}"
            parts.append(part if required else f"({part})?")
        if not parts:  # a schema that names no parameters: any keys, each value as text
            before, after = self.opening.split("%s")
            key = f"{literal(before)} [A-Za-z0-9_-]+ {literal(after)}"
            parts.append(f"({key} {text} {literal(self.closing)})*")
        return " ".join(parts)


class Glm(_Tagged):
    name: ClassVar[ToolFormat] = "glm"
    starts = ("<tool_call>",)
    example = (
        "<tool_call><function-name>\n<arg_key><key-1></arg_key>\n<arg_value><value-1></arg_value>"
        "\n</tool_call>"
    )
    opening = "<arg_key>%s</arg_key>\n<arg_value>"
    closing = "</arg_value>\n"
    _CALL = re.compile(rf"<tool_call>\s*({_NAME})\s*(.*?)</tool_call>", re.DOTALL)
    _ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)

    def detects(self, template: str) -> bool:
        return "<arg_key>" in template and "<tool_call>" in template

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        return _tagged_calls(self._CALL, self._ARGUMENT, calls, tools)

    def write(self, calls: Sequence[ToolCall]) -> str:
        return "\n".join(
            f"<tool_call>{call.name}\n"
            + "".join(self.opening % k + _written(v) + self.closing for k, v in call.values.items())
            + "</tool_call>"
            for call in calls
        )

    def call_rule(self, tool: Tool, rules: Rules) -> str:
        return f"{literal(tool.name + chr(10))} {self.arguments_rule(tool, rules)}"

    def root(self, several: bool, rules: Rules) -> str:
        one = rules.add("one", '"<tool_call>" call "</tool_call>"')
        return f'{one} ("\\n" {one})*' if several else one


class Qwen3Coder(_Tagged):
    name: ClassVar[ToolFormat] = "qwen3-coder"
    starts = ("<tool_call>",)
    example = (
        "<tool_call>\n<function=<function-name>>\n<parameter=<key-1>>\n<value-1>\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    opening = "<parameter=%s>\n"
    closing = "\n</parameter>\n"
    _CALL = re.compile(
        rf"<tool_call>\s*<function=({_NAME})>(.*?)</function>\s*</tool_call>", re.DOTALL
    )
    _ARGUMENT = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)

    def detects(self, template: str) -> bool:
        return all(tag in template for tag in ("<tool_call>", "<function=", "<parameter="))

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        return _tagged_calls(self._CALL, self._ARGUMENT, calls, tools)

    def write(self, calls: Sequence[ToolCall]) -> str:
        return "\n".join(
            f"<tool_call>\n<function={call.name}>\n"
            + "".join(self.opening % k + _written(v) + self.closing for k, v in call.values.items())
            + "</function>\n</tool_call>"
            for call in calls
        )

    def call_rule(self, tool: Tool, rules: Rules) -> str:
        opening = literal(f"<function={tool.name}>\n")
        return f"{opening} {self.arguments_rule(tool, rules)} {literal('</function>' + chr(10))}"

    def root(self, several: bool, rules: Rules) -> str:
        one = rules.add("one", '"<tool_call>\\n" call "</tool_call>"')
        return f'{one} ("\\n" {one})*' if several else one
