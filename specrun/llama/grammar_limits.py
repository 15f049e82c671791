"""What a grammar or a JSON schema may cost, checked before llama.cpp or the schema converter
sees it: the limits in one place, each in the error that refuses it.

llama.cpp parses GBNF by recursive descent, one native stack frame pair per nested group:
measured here (`llama-grammar.cpp`, llama-cpp-python 0.3.36), about 450 bytes of stack a
level, so 2,300 levels overflow a 1 MiB stack and 19,000 an 8 MiB one, a segfault that
takes the process with it. Its check of left recursion recurses along chains of rules, about
130 bytes a rule. A grammar's cost per token grows with the alternatives open at once (a
20,000-value enum: seconds a token), and parsing it with its size. The schema converter
(llama-cpp-python's port of llama.cpp's) turns `maxLength` and `maxItems` into groups nested
as deep as the count, an object's optional properties into work quadratic in their number
(and Python recursion as deep), and recurses along the schema's nesting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from specrun.errors import SpecrunError
from specrun.llama.schemas import DATA_KEYWORDS

# GBNF text, as given or as converted from a schema.
MAX_GRAMMAR_BYTES = 256 * 1024  # parsing 360 KiB took 1.7 s
MAX_NESTING = 1_000  # groups in groups: ~450 KiB of native stack, under half of 1 MiB
MAX_RULES = 4_096  # rules defined: a chain of them is ~530 KiB of native stack
MAX_ALTERNATIVES = 512  # `|` alternatives of one rule or group: 512 values ~0.2 s a full row
MAX_REPEAT = 1_000  # a repetition count (`x{m,n}`, `minLength`, `maxItems`...): nests that deep
# JSON schemas, before conversion.
MAX_SCHEMA_BYTES = 1024 * 1024  # a schema file's JSON (a request's is bounded by its body's)
MAX_SCHEMA_DEPTH = 64  # JSON nesting of the schema: the converter recurses along it
MAX_PROPERTIES = 256  # of one object: the converter is quadratic in the optional ones
MAX_TOTAL_PROPERTIES = 1_024  # of all objects together
REPEAT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems")
ALTERNATIVE_KEYWORDS = ("enum", "oneOf", "anyOf")


class GrammarLimitError(SpecrunError):
    """A grammar or schema past one of the limits above."""


# What GBNF holds that may contain brackets of its own: literals, character classes, comments
# (each skipped whole), then what counts: groups, alternatives, repetitions, rule definitions.
_GBNF_TOKENS = re.compile(
    r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#[^\r\n]*|[()|]|\{[^}]*\}|::=', re.DOTALL
)
_QUANTIFIER = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


def check_gbnf(text: str) -> None:
    """Refuse GBNF text that would cost llama.cpp more than the limits allow, or that it would
    read as something else (a NUL ends a C string: what follows would be dropped silently)."""
    if "\x00" in text:
        raise GrammarLimitError("the grammar holds a NUL character, which GBNF cannot hold")
    size = len(text.encode("utf-8"))
    if size > MAX_GRAMMAR_BYTES:
        raise GrammarLimitError(
            f"the grammar is {size} bytes; at most {MAX_GRAMMAR_BYTES} are allowed"
        )
    alternatives = [0]  # per open group, the rule's own at the bottom
    rules = 0
    for match in _GBNF_TOKENS.finditer(text):
        token = match.group()
        if token == "::=":
            rules += 1
            alternatives = [0]
        elif token == "(":
            alternatives.append(0)
            if len(alternatives) > MAX_NESTING + 1:
                raise GrammarLimitError(
                    f"the grammar nests groups deeper than {MAX_NESTING} levels"
                )
        elif token == ")" and len(alternatives) > 1:  # one too many: the parser's to say
            alternatives.pop()
        elif token == "|":
            alternatives[-1] += 1
            if alternatives[-1] >= MAX_ALTERNATIVES:
                raise GrammarLimitError(
                    f"a rule of the grammar has more than {MAX_ALTERNATIVES} alternatives"
                )
        elif token.startswith("{"):
            _check_counts(token, "the grammar repeats", f"`{token}`")
    if rules > MAX_RULES:
        raise GrammarLimitError(f"the grammar defines {rules} rules; at most {MAX_RULES}")
    if rules == 0:
        raise GrammarLimitError("the grammar is empty: it defines no rule (GBNF: `root ::= ...`)")


def _check_counts(quantifier: str, what: str, shown: str) -> None:
    """A `{m}`, `{m,}` or `{m,n}` quantifier's counts, each at most MAX_REPEAT (llama.cpp
    itself would read an n over 2,000 as no bound at all)."""
    found = _QUANTIFIER.fullmatch(quantifier)
    counts = [int(n) for n in found.groups() if n] if found else []
    if any(count > MAX_REPEAT for count in counts):
        raise GrammarLimitError(f"{what} {shown}: a count may be at most {MAX_REPEAT}")


@dataclass
class _Totals:
    properties: int = 0


def check_schema(schema: Any) -> None:
    """Refuse a JSON schema whose conversion or grammar would cost more than the limits
    allow, naming where in the schema (as `properties.name.maxLength`)."""
    totals = _Totals()
    pending: list[tuple[Any, str, int]] = [(schema, "", 0)]  # a value, its path, its depth
    while pending:
        value, path, depth = pending.pop()
        if isinstance(value, list):
            children: Any = enumerate(value)
        elif isinstance(value, dict):
            _check_node(value, path, totals)
            children = [(k, v) for k, v in value.items() if k not in DATA_KEYWORDS]
        else:
            continue
        if depth == MAX_SCHEMA_DEPTH:
            raise GrammarLimitError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        for key, child in children:
            inner = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
            pending.append((child, inner, depth + 1))


def _check_node(node: dict[str, Any], path: str, totals: _Totals) -> None:
    def where(keyword: str) -> str:
        return f"`{path}.{keyword}`" if path else f"`{keyword}`"

    for keyword in REPEAT_KEYWORDS:
        count = node.get(keyword)
        if isinstance(count, int) and not isinstance(count, bool) and count > MAX_REPEAT:
            raise GrammarLimitError(
                f"the JSON schema's {where(keyword)} is {count}; at most {MAX_REPEAT} "
                "(the grammar spells out each repetition)"
            )
    for keyword in ALTERNATIVE_KEYWORDS:
        options = node.get(keyword)
        if isinstance(options, list) and len(options) > MAX_ALTERNATIVES:
            raise GrammarLimitError(
                f"the JSON schema's {where(keyword)} has {len(options)} values; "
                f"at most {MAX_ALTERNATIVES}"
            )
    properties = node.get("properties")
    if isinstance(properties, dict):
        if len(properties) > MAX_PROPERTIES:
            raise GrammarLimitError(
                f"the JSON schema's {where('properties')} has {len(properties)} properties; "
                f"at most {MAX_PROPERTIES} in one object"
            )
        totals.properties += len(properties)
        if totals.properties > MAX_TOTAL_PROPERTIES:
            raise GrammarLimitError(
                f"the JSON schema has more than {MAX_TOTAL_PROPERTIES} properties in all"
            )
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        for quantifier in re.findall(r"\{[^}]*\}", pattern):
            _check_counts(quantifier, f"the JSON schema's {where('pattern')} repeats", quantifier)
