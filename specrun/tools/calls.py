"""The tools a conversation offers and the calls a model makes of them, whatever the syntax:
a call's arguments are always JSON text, as OpenAI's clients expect, even where the model
wrote them as tagged strings (GLM's, Qwen3-Coder's), converted by the tool's schema."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal


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

    def parameter(self, name: str) -> Any:
        """The schema of one parameter, with the tool's `$defs` its `$ref`s may point into;
        {} (anything) for one the schema does not name."""
        schema = self.schema if isinstance(self.schema, dict) else {}
        properties = schema.get("properties")
        found = properties.get(name) if isinstance(properties, dict) else None
        if not isinstance(found, dict):
            return {}
        return {**found, "$defs": schema["$defs"]} if "$defs" in schema else found

    def parameters_in_order(self) -> list[tuple[str, bool]]:
        """Each named parameter and whether it is required: the required first, each group
        in the schema's order."""
        schema = self.schema if isinstance(self.schema, dict) else {}
        properties = schema.get("properties")
        names = list(properties) if isinstance(properties, dict) else []
        required = set(schema.get("required") or ())
        return [(n, True) for n in names if n in required] + [
            (n, False) for n in names if n not in required
        ]


def is_text(schema: Any) -> bool:
    """Whether a parameter's value may be a string, so that a tagged syntax writes it bare:
    a schema that names no type, or whose types include "string"."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind is None:
        return not (isinstance(schema, dict) and ("enum" in schema or "const" in schema))
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def typed_value(raw: str, schema: Any) -> Any:
    """A tagged argument's text as its JSON value: a string where the schema allows only
    strings; else the JSON the text holds, or the text itself where it holds none (a string
    the schema also allows, or a mistake the client sees as it was written)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string":
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: its id, the function, and the arguments as JSON text."""

    name: str
    arguments: str
    id: str = ""

    @classmethod
    def made(cls, name: str, arguments: Any, id: str = "") -> ToolCall:
        """A call read from an answer: a fresh id unless the syntax gives one (Kimi's)."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return cls(name, text, id or "call_" + secrets.token_hex(12))

    @classmethod
    def tagged(cls, tool: Tool, pairs: Iterable[tuple[str, str]]) -> ToolCall:
        """A call whose arguments came as (name, text) pairs, typed by the tool's schema."""
        arguments = {key: typed_value(raw, tool.parameter(key)) for key, raw in pairs}
        return cls.made(tool.name, arguments)

    @property
    def values(self) -> dict[str, Any]:
        """The arguments as an object (what templates render)."""
        value = json.loads(self.arguments or "{}")
        return value if isinstance(value, dict) else {}


# How the answer must begin: "auto" lets the model choose, "required" asks for a call of any
# tool, a name for a call of that one; "none" offers no tools at all.
ToolChoice = Literal["auto", "required", "none"] | str
