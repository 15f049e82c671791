"""JSON schemas as the schema converter (llama-cpp-python's port of llama.cpp's) can read them.

The converter reads a `$ref` only as a pointer from the root of the document it is given, so a
schema nested in another (a tool's parameters in the grammar of a call) loses its `$defs`; it
reads no `$ref` to the root (`#`, a recursive schema's), no `$defs` beside a `$ref` (pydantic's
recursive models), and no boolean schema (`true`, `false`). `flattened` rewrites a schema for
it: every definition a `$ref` points to is moved into one `$defs` table under a name of its
own, each `$ref` points there, a root that is only a `$ref` is the schema it points to, `true`
is `{}`, and `false` (nothing allowed) is refused.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from specrun.errors import SpecrunError

DEFINITIONS = ("$defs", "definitions")  # where schemas keep what `$ref`s point to
NAMED_SCHEMAS = ("properties", "patternProperties")  # a schema under each name, any name
DATA_KEYWORDS = ("enum", "const", "default", "examples")  # values, not schemas
RULE_NAME = re.compile(r"[^a-zA-Z0-9-]+")  # what a GBNF rule name cannot hold
# What the converter takes each keyword to be; anything else fails inside it in Python's words.
SHAPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys((*NAMED_SCHEMAS, *DEFINITIONS), (dict,)),
    **dict.fromkeys(("required", "enum", "anyOf", "oneOf", "allOf", "prefixItems"), (list,)),
    "items": (dict, bool, list),
    "additionalProperties": (dict, bool),
    "type": (str, list),
    **dict.fromkeys(("pattern", "format", "$ref"), (str,)),
    **dict.fromkeys(("minLength", "maxLength", "minItems", "maxItems"), (int,)),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"), (int, float)),
}
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")  # arrays of schemas
KIND_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
KIND_NAMES |= {int: "a whole number", float: "a number"}


class SchemaError(SpecrunError):
    """A JSON schema that means nothing the converter can read, said in one line."""


class Definitions:
    """The `$defs` table of the schema the converter reads: the definitions of one or more
    documents (a call's grammar holds every tool's), each under a name of its own."""

    def __init__(self) -> None:
        self.table: dict[str, Any] = {}

    def flattened(self, document: Any) -> Any:
        """`document` with its `$ref`s pointing into this table (filled as they are met)."""
        names: dict[str, str] = {}  # a pointer in the document: its name in the table
        pointers: dict[str, str] = {}  # a renamed `$ref`: the pointer it stands for
        pending: list[str] = []

        def name_of(pointer: str) -> str:
            if pointer not in names:
                last = RULE_NAME.sub("-", pointer.rsplit("/", 1)[-1]).strip("-") or "schema"
                names[pointer] = f"{last}-{len(self.table) + len(pending)}"
                pointers[f"#/$defs/{names[pointer]}"] = pointer
                pending.append(pointer)
            return f"#/$defs/{names[pointer]}"

        root = _rewritten(document, name_of, "")
        followed: set[str] = set()
        while isinstance(root, dict) and "$ref" in root:  # the converter reads nothing beside it
            pointer = pointers[root["$ref"]]
            if pointer in followed:
                raise SchemaError("the JSON schema is a `$ref` to itself, which allows nothing")
            followed.add(pointer)
            root = _rewritten(_target(document, pointer), name_of, pointer)
        while pending:
            pointer = pending.pop()
            self.table[names[pointer]] = _rewritten(_target(document, pointer), name_of, pointer)
        return root

    def document(self, root: Any) -> Any:
        """The schema the converter reads: `root` with the table beside it."""
        return {**root, "$defs": self.table} if self.table else root


def converter_ready(schema: Any) -> Any:
    """One schema, flattened for the converter."""
    definitions = Definitions()
    return definitions.document(definitions.flattened(schema))


def _rewritten(node: Any, name_of: Any, path: str) -> Any:
    """A copy of a schema with `true` as `{}`, `$ref`s renamed and definitions left out (they
    go into the table); `false` refused."""
    if node is True:
        return {}
    if node is False:
        where = f" at `{path.lstrip('#/').replace('/', '.')}`" if path else ""
        raise SchemaError(f"the JSON schema{where} is `false`, which allows no value")
    if isinstance(node, list):
        return [_rewritten(item, name_of, f"{path}/{i}") for i, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    _check_shapes(node, path)
    copy: dict[str, Any] = {}
    for key, value in node.items():
        if key in DEFINITIONS:
            continue
        if key == "$ref":
            copy[key] = name_of(_pointer(value))
        elif key in DATA_KEYWORDS or (key == "additionalProperties" and isinstance(value, bool)):
            copy[key] = value  # the converter reads a boolean here as such
        elif key in NAMED_SCHEMAS and isinstance(value, dict):
            copy[key] = {
                name: _rewritten(schema, name_of, f"{path}/{key}/{name}")
                for name, schema in value.items()
            }
        else:
            copy[key] = _rewritten(value, name_of, f"{path}/{key}")
    return copy


def _check_shapes(node: dict[str, Any], path: str) -> None:
    """Refuse a keyword whose value is not of the kind the converter reads it as."""
    for key, value in node.items():
        kinds = SHAPES.get(key)
        if kinds is None:
            continue
        where = ".".join(filter(None, (path.lstrip("#/").replace("/", "."), key)))
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            should = " or ".join(KIND_NAMES[kind] for kind in kinds)
            raise SchemaError(f"the JSON schema's `{where}` should be {should}, not {_kind(value)}")
        if isinstance(value, list) and key in ("required", "type"):
            _each(value, where, "strings", lambda item: isinstance(item, str))
        elif isinstance(value, list) and key in SCHEMA_LISTS:
            _each(value, where, "schemas (objects or booleans)", _is_schema)
        elif isinstance(value, dict) and key in (*NAMED_SCHEMAS, *DEFINITIONS):
            _each(list(value.values()), where, "schemas (objects or booleans)", _is_schema)


def _is_schema(value: Any) -> bool:
    return isinstance(value, (dict, bool))


def _each(values: list[Any], where: str, should: str, fits: Any) -> None:
    for value in values:
        if not fits(value):
            raise SchemaError(
                f"the JSON schema's `{where}` should hold only {should}, not {_kind(value)}"
            )


def _kind(value: Any) -> str:
    """A JSON value's kind, in JSON's words."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    names = {dict: "an object", list: "an array", str: "a string", int: "a number"}
    return names.get(type(value), "a number")


def _pointer(ref: str) -> str:
    """A `$ref`'s JSON pointer within its document ("" for the root)."""
    if not ref.startswith("#"):
        raise SchemaError(
            f"the JSON schema's `$ref` {ref!r} is not within the schema: only `#/...` is read"
        )
    return unquote(ref[1:])


def _target(document: Any, pointer: str) -> Any:
    """What a JSON pointer points to in `document`."""
    target = document
    for part in pointer.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and key in target:
            target = target[key]
        elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
            target = target[int(key)]
        else:
            raise SchemaError(f"the JSON schema's `$ref` #{pointer} points to nothing in it")
    return target
