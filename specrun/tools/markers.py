"""Syntaxes that wrap JSON arguments in special tokens of their own: DeepSeek-R1's (a fenced
JSON block after `function<｜tool▁sep｜>NAME`), DeepSeek-V3.1's (`NAME<｜tool▁sep｜>{...}`)
and Kimi-K2's (`functions.NAME:INDEX<|tool_call_argument_begin|>{...}`, whose id is the
call's id: Kimi's template writes it back as it was)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

from specrun.tools.calls import Tool, ToolCall
from specrun.tools.gbnf import Rules, literal
from specrun.tools.syntax import Syntax, ToolFormat, json_arguments

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_NAME = r"[A-Za-z0-9_-]+"


def _json_calls(pattern: re.Pattern[str], text: str) -> list[ToolCall] | None:
    """Each match of `pattern` (the name, the arguments' JSON) as a call; None where none
    matches or one's arguments are not a JSON object."""
    calls = []
    for match in pattern.finditer(text):
        arguments = json_arguments(match[2])
        if arguments is None:
            return None
        calls.append(ToolCall.made(match[1], arguments))
    return calls or None


class _DeepSeek(Syntax):
    starts = (CALLS_BEGIN, CALL_BEGIN)  # models skip the first at times
    kept = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)
    _CALL: ClassVar[re.Pattern[str]]

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        return _json_calls(self._CALL, calls)

    def write(self, calls: Sequence[ToolCall]) -> str:
        return CALLS_BEGIN + "".join(map(self._one, calls)) + CALLS_END

    def _one(self, call: ToolCall) -> str:
        raise NotImplementedError

    def root(self, several: bool, rules: Rules) -> str:
        return f"{literal(CALLS_BEGIN)} call{'+' if several else ''} {literal(CALLS_END)}"


class DeepSeekR1(_DeepSeek):
    name: ClassVar[ToolFormat] = "deepseek-r1"
    example = (
        f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}<function-name>\n```json\n<arguments-object>\n"
        f"```{CALL_END}{CALLS_END}"
    )
    _CALL = re.compile(
        rf"{CALL_BEGIN}\s*(?:function)?\s*{SEP}\s*({_NAME})\s*"
        rf"```(?:json)?\s*(.*?)\s*```\s*{CALL_END}",
        re.DOTALL,
    )

    def detects(self, template: str) -> bool:
        return SEP in template and "```json" in template

    def _one(self, call: ToolCall) -> str:
        arguments = json.dumps(call.values)
        return f"{CALL_BEGIN}function{SEP}{call.name}\n```json\n{arguments}\n```{CALL_END}"

    def call_rule(self, tool: Tool, rules: Rules) -> str:
        opening = literal(f"{CALL_BEGIN}function{SEP}{tool.name}\n```json\n")
        return f"{opening} {rules.json(tool.schema)} {literal(chr(10) + '```' + CALL_END)}"


class DeepSeekV31(_DeepSeek):
    name: ClassVar[ToolFormat] = "deepseek-v3.1"
    example = (
        f"{CALLS_BEGIN}{CALL_BEGIN}<function-name>{SEP}<arguments-object>{CALL_END}{CALLS_END}"
    )
    _CALL = re.compile(rf"{CALL_BEGIN}\s*({_NAME})\s*{SEP}\s*(.*?)\s*{CALL_END}", re.DOTALL)

    def detects(self, template: str) -> bool:
        return SEP in template

    def _one(self, call: ToolCall) -> str:
        return f"{CALL_BEGIN}{call.name}{SEP}{json.dumps(call.values)}{CALL_END}"

    def call_rule(self, tool: Tool, rules: Rules) -> str:
        opening = literal(f"{CALL_BEGIN}{tool.name}{SEP}")
        return f"{opening} {rules.json(tool.schema)} {literal(CALL_END)}"


SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
KIMI_BEGIN, KIMI_ARGUMENTS, KIMI_END = (
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
)


class KimiK2(Syntax):
    name: ClassVar[ToolFormat] = "kimi-k2"
    starts = (SECTION_BEGIN, KIMI_BEGIN)
    kept = (SECTION_BEGIN, SECTION_END, KIMI_BEGIN, KIMI_ARGUMENTS, KIMI_END)
    example = (
        f"{SECTION_BEGIN}{KIMI_BEGIN}functions.<function-name>:0{KIMI_ARGUMENTS}"
        f"<arguments-object>{KIMI_END}{SECTION_END}"
    )
    _CALL = re.compile(
        rf"{re.escape(KIMI_BEGIN)}\s*((?:functions\.)?({_NAME})(?::\d+)?)\s*"
        rf"{re.escape(KIMI_ARGUMENTS)}\s*(.*?)\s*(?:{re.escape(KIMI_END)}|$)",
        re.DOTALL,
    )

    def detects(self, template: str) -> bool:
        return SECTION_BEGIN in template and KIMI_BEGIN in template

    def read(self, calls: str, tools: Mapping[str, Tool]) -> list[ToolCall] | None:
        found = []
        for match in self._CALL.finditer(calls):
            arguments = json_arguments(match[3])
            if arguments is None:
                return None
            found.append(ToolCall.made(match[2], arguments, id=match[1]))
        return found or None

    def write(self, calls: Sequence[ToolCall]) -> str:
        return (
            SECTION_BEGIN
            + "".join(
                f"{KIMI_BEGIN}functions.{call.name}:{index}{KIMI_ARGUMENTS}"
                f"{json.dumps(call.values)}{KIMI_END}"
                for index, call in enumerate(calls)
            )
            + SECTION_END
        )

    def call_rule(self, tool: Tool, rules: Rules) -> str:
        opening = literal(f"{KIMI_BEGIN}functions.{tool.name}:")
        arguments = f"{literal(KIMI_ARGUMENTS)} {rules.json(tool.schema)} {literal(KIMI_END)}"
        return f"{opening} [0-9]{{1,3}} {arguments}"

    def root(self, several: bool, rules: Rules) -> str:
        return f"{literal(SECTION_BEGIN)} call{'+' if several else ''} {literal(SECTION_END)}"
