"""Tool calls: the tools a conversation offers the model, how its chat template is told of
them, and how its answer is read back as calls.

A template that renders `tools` itself (Qwen's and Hermes', Llama 3.1's, Mistral's) gets
them as Hugging Face templates take them, and its tool-call syntax is recognized from the
template: Hermes' `<tool_call>{"name": ..., "arguments": ...}</tool_call>`, Llama 3.x's bare
`{"name": ..., "parameters": ...}`, Mistral's `[TOOL_CALLS][{"name": ..., "arguments": ...}]`.
A template that does not (SmolLM2's) gets the tools in a system message, with Hermes' syntax
asked for, and tool results as user turns in `<tool_response>` tags. `tool_choice` required
or a named function is enforced by a grammar of the syntax over the tools' schemas, so even a
small model answers with a call that parses against them.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from specrun.llama.grammar import GrammarError, schema_grammar
from specrun.llama.schemas import Definitions, SchemaError

ToolFormat = Literal["hermes", "llama3", "mistral", "generic"]


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, what it does, and its parameters' schema."""

    name: str
    description: str = ""
    parameters: Any = None  # a JSON schema (an object's), or None for no parameters

    def as_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.schema,
            },
        }

    @property
    def schema(self) -> Any:
        return self.parameters if self.parameters is not None else {"type": "object"}


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: its id, the function, and the arguments as JSON text."""

    name: str
    arguments: str
    id: str = ""

    @classmethod
    def made(cls, name: str, arguments: Any) -> ToolCall:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls(name, text, "call_" + secrets.token_hex(12))


# How the answer must begin: "auto" lets the model choose, "required" asks for a call of any
# tool, a name for a call of that one; "none" offers no tools at all.
ToolChoice = Literal["auto", "required", "none"] | str


def tool_format(template: str | None) -> ToolFormat:
    """The tool-call syntax a chat template teaches, from what it writes."""
    if not template or "tools" not in template:
        return "generic"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3"
    return "hermes"


def system_text(tools: list[Tool]) -> str:
    """The system message that tells a template without tools of them (Hermes' wording)."""
    listed = "\n".join(json.dumps(tool.as_openai()["function"]) for tool in tools)
    return (
        "You may call one or more functions to answer. The functions, as JSON schemas:\n"
        f"<tools>\n{listed}\n</tools>\n"
        "To call one, answer with its name and arguments as JSON in these tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call>'
    )


def call_text(call: ToolCall, fmt: ToolFormat) -> str:
    """A call as the model writes it, for a template that cannot render `tool_calls`."""
    arguments = json.loads(call.arguments or "{}")
    if fmt == "llama3":
        return json.dumps({"name": call.name, "parameters": arguments})
    if fmt == "mistral":
        return "[TOOL_CALLS]" + json.dumps([{"name": call.name, "arguments": arguments}])
    return (
        "<tool_call>\n" + json.dumps({"name": call.name, "arguments": arguments}) + "\n</tool_call>"
    )


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_calls(text: str, fmt: ToolFormat, offered: Collection[str]) -> tuple[str, list[ToolCall]]:
    """The text before the calls and the calls of an answer; ([text], []) where it makes none,
    where what looks like one is not JSON of a call, or where it calls a function that is not
    among the names `offered` (no client could run it: it is what the model said, as text)."""
    before, calls = _parsed_calls(text, fmt)
    if any(call.name not in offered for call in calls):
        return text, []
    return before, calls


def _parsed_calls(text: str, fmt: ToolFormat) -> tuple[str, list[ToolCall]]:
    if fmt == "mistral":
        head, marker, tail = text.partition("[TOOL_CALLS]")
        calls = _calls(_json(tail.strip()), "arguments") if marker else []
        return (head.strip(), calls) if calls else (text, [])
    if fmt == "llama3":
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if body.startswith("{"):
            parts = [_json(part) for part in re.split(r"\s*;\s*(?=\{)", body)]
            calls = [c for part in parts for c in _calls(part, "parameters", "arguments")]
            if calls and len(calls) == len(parts):
                return "", calls
        return text, []
    found = [_json(match) for match in _HERMES.findall(text)]
    calls = [c for part in found for c in _calls(part, "arguments")]
    if not calls:
        return text, []
    return text[: text.find("<tool_call>")].strip(), calls


class CallStream:
    """An answer streamed while tools are offered: its text goes out as it comes, but for
    what may be (the start of) a call, which is held until the answer ends and then read
    as calls, or sent as the text it turned out to be."""

    MARKERS = {"hermes": "<tool_call>", "generic": "<tool_call>", "mistral": "[TOOL_CALLS]"}

    def __init__(self, fmt: ToolFormat, offered: Collection[str]) -> None:
        self.fmt = fmt
        self.offered = offered
        self.text = ""
        self.sent = 0  # how much of the text went out

    def feed(self, text: str) -> str:
        """The part of the answer so far that can go out now."""
        self.text += text
        end = max(self.sent, self._safe_end())
        out, self.sent = self.text[self.sent : end], end
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        """At the answer's end: the text still held, or the calls it holds."""
        _, calls = parse_calls(self.text, self.fmt, self.offered)
        return ("", calls) if calls else (self.text[self.sent :], [])

    def _safe_end(self) -> int:
        if self.fmt == "llama3":  # a call is the whole answer: none of it goes out while it may be
            body = self.text.lstrip()
            tag = "<|python_tag|>"
            maybe = not body or body.startswith(("{", tag)) or tag.startswith(body)
            return self.sent if maybe else len(self.text)
        marker = self.MARKERS[self.fmt]
        at = self.text.find(marker)
        if at >= 0:
            return at
        for size in range(min(len(marker) - 1, len(self.text)), 0, -1):
            if self.text.endswith(marker[:size]):  # the marker may be arriving
                return len(self.text) - size
        return len(self.text)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _calls(value: Any, *argument_keys: str) -> list[ToolCall]:
    """Calls from a parsed object or list of objects with a name and arguments."""
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return []
        arguments: Any = next((item[key] for key in argument_keys if key in item), {})
        calls.append(ToolCall.made(item["name"], arguments))
    return calls


def call_grammar(tools: list[Tool], choice: ToolChoice, fmt: ToolFormat) -> str:
    """GBNF for an answer that is one call (of the tool named by `choice`, or of any): the
    syntax of `fmt` around JSON that the tool's parameter schema allows. Each schema keeps
    its own `$defs`: nested in the call's, its `$ref`s are moved to point into the call's."""
    chosen = [t for t in tools if choice in ("required", t.name)]
    key = "parameters" if fmt == "llama3" else "arguments"
    definitions = Definitions()
    try:
        options = [
            {
                "type": "object",
                "properties": {
                    "name": {"const": tool.name},
                    key: definitions.flattened(tool.schema),
                },
                "required": ["name", key],
            }
            for tool in chosen
        ]
    except SchemaError as error:
        raise GrammarError(str(error)) from None
    schema = definitions.document(options[0] if len(options) == 1 else {"oneOf": options})
    call = re.sub(r"^root ::=", "call ::=", schema_grammar(schema), flags=re.MULTILINE)
    if fmt == "llama3":
        return "root ::= call\n" + call
    if fmt == "mistral":
        return 'root ::= "[TOOL_CALLS][" call "]"\n' + call
    return 'root ::= "<tool_call>\\n" call "\\n</tool_call>"\n' + call
