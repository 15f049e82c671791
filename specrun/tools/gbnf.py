"""Pieces of GBNF for call grammars: literals, text up to a closing tag, and the grammars of
several JSON schemas side by side in one grammar (each converted alone, its rules renamed
into a namespace of its own so that two schemas' `string` or `root` cannot clash)."""

from __future__ import annotations

import json
import re
from typing import Any

from specrun.llama.grammar import GrammarError, schema_grammar
from specrun.llama.schemas import Definitions, SchemaError

# A GBNF body's tokens: a quoted literal, a character class, or a rule's name.
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z][A-Za-z0-9-]*')


def literal(text: str) -> str:
    """`text` as a GBNF string literal (UTF-8 written as is, as llama.cpp reads it)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


def _class_char(char: str) -> str:
    return (
        "\\" + char if char in "]\\^-[" else {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char, char)
    )


def until(closer: str) -> str:
    """Any text that does not contain `closer` (nor a second copy of its first character
    where a prefix of it stands): safe to end at the closer, which the parser looks for.
    It gives up texts with such a repeat ("<<"); it never allows one that holds the closer."""
    first = _class_char(closer[0])
    options = [f"[^{first}]"]
    for size in range(1, len(closer)):
        options.append(f"{literal(closer[:size])} [^{_class_char(closer[size])}{first}]")
    return "(" + " | ".join(options) + ")*"


class Rules:
    """The named rules of one grammar, added as a call grammar is built."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._schemas: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        self.lines.append(f"{name} ::= {body}")
        return name

    def json(self, schema: Any) -> str:
        """The rule of JSON that `schema` allows: a whole document (its `$defs` at its root)."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self._schemas:
            prefix = f"j{len(self._schemas)}-"
            for line in schema_grammar(schema).splitlines():
                self.lines.append(
                    _TOKEN.sub(lambda m: m[0] if m[0][0] in '"[' else prefix + m[0], line)
                )
            self._schemas[key] = prefix + "root"
        return self._schemas[key]

    def wrapped(self, schema: Any, around: Any) -> str:
        """The rule of JSON that `around(inner)` allows, where `inner` stands for `schema`
        nested in it: its `$ref`s moved to point into the whole's `$defs`."""
        try:
            definitions = Definitions()
            return self.json(definitions.document(around(definitions.flattened(schema))))
        except SchemaError as error:
            raise GrammarError(str(error)) from None

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
