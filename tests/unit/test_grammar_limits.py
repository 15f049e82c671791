"""The grammar limits and the schema rewriting, without a model: what is refused before
llama.cpp or the schema converter sees it, with the limit in the words, and what the converter
is given for `$defs`, `$ref` and boolean schemas (issue 49). The server's and the command
line's refusals are tested on the real commands in tests/e2e/test_hostile_grammars.py."""

from __future__ import annotations

import re

import pytest

from specrun.core.sampling import SamplingParams
from specrun.llama.grammar import GrammarError, schema_grammar
from specrun.llama.grammar_limits import (
    MAX_ALTERNATIVES,
    MAX_NESTING,
    MAX_PROPERTIES,
    MAX_REPEAT,
    MAX_RULES,
    MAX_SCHEMA_DEPTH,
    GrammarLimitError,
    check_gbnf,
)
from specrun.llama.schemas import SchemaError, converter_ready
from specrun.server.bodies import ChatCompletionRequest
from specrun.server.requests import ApiError, chat_request


def nested(depth: int) -> str:
    return "root ::= " + "(" * depth + '"a"' + ")" * depth


@pytest.mark.parametrize(
    "grammar",
    [
        nested(MAX_NESTING),
        'root ::= "((((" [(] "\\"(" # (((((\n',  # brackets in literals, classes and comments
        "root ::= " + " | ".join(f'"{i}"' for i in range(MAX_ALTERNATIVES)),
        'root ::= "a"{0,' + str(MAX_REPEAT) + "}",
    ],
    ids=["deepest", "quoted", "widest", "longest"],
)
def test_a_grammar_within_the_limits_passes(grammar):
    check_gbnf(grammar)


@pytest.mark.parametrize(
    "grammar, said",
    [
        (nested(MAX_NESTING + 1), f"deeper than {MAX_NESTING} levels"),
        (
            "root ::= " + " | ".join(f'"{i}"' for i in range(MAX_ALTERNATIVES + 1)),
            f"more than {MAX_ALTERNATIVES} alternatives",
        ),
        ('root ::= "a"{' + str(MAX_REPEAT + 1) + "}", f"at most {MAX_REPEAT}"),
        ('root ::= "a"{1,' + str(MAX_REPEAT + 1) + "}", f"at most {MAX_REPEAT}"),
        ("".join(f'r{i} ::= "a"\n' for i in range(MAX_RULES + 1)), f"at most {MAX_RULES}"),
        ("", "defines no rule"),
        ("# only a comment\n", "defines no rule"),
        ('root ::= "a"\x00 | "b"', "NUL"),
    ],
)
def test_a_grammar_past_a_limit_is_refused_saying_which(grammar, said):
    with pytest.raises(GrammarLimitError, match=re.escape(said)):
        check_gbnf(grammar)


@pytest.mark.parametrize(
    "schema, said",
    [
        ({"type": "string", "maxLength": MAX_REPEAT + 1}, "`maxLength` is"),
        ({"type": "array", "minItems": 10**9}, "`minItems` is"),
        ({"enum": list(range(MAX_ALTERNATIVES + 1))}, "`enum` has"),
        ({"anyOf": [{"const": i} for i in range(MAX_ALTERNATIVES + 1)]}, "`anyOf` has"),
        (
            {"properties": {f"p{i}": {} for i in range(MAX_PROPERTIES + 1)}},
            f"at most {MAX_PROPERTIES} in one object",
        ),
        ({"properties": {"a": {"pattern": "^x{2,99999}$"}}}, "`properties.a.pattern` repeats"),
        ({"items": {"items": {"maxLength": 5000}}}, "`items.items.maxLength`"),
    ],
)
def test_a_schema_past_a_limit_is_refused_before_it_is_converted(schema, said):
    with pytest.raises(GrammarError, match=re.escape(said)):
        schema_grammar(schema)


def test_a_schema_nested_past_the_limit_is_refused():
    schema: dict = {}
    for _ in range(MAX_SCHEMA_DEPTH):
        schema = {"items": schema}
    with pytest.raises(GrammarError, match=f"deeper than {MAX_SCHEMA_DEPTH} levels"):
        schema_grammar(schema)


def test_enum_values_are_data_not_schemas():
    schema_grammar({"enum": [{"maxLength": 10**6}, "x"]})


def test_defs_move_into_one_table_and_refs_point_there():
    item = {"type": "integer"}
    schema = {"$defs": {"Item": item}, "properties": {"a": {"$ref": "#/$defs/Item"}}}
    assert converter_ready(schema) == {
        "properties": {"a": {"$ref": "#/$defs/Item-0"}},
        "$defs": {"Item-0": item},
    }


def test_a_root_that_is_a_ref_is_what_it_points_to():
    node = {"type": "array", "items": {"$ref": "#/$defs/node"}}
    ready = converter_ready({"$defs": {"node": node}, "$ref": "#/$defs/node"})
    assert ready == {
        "type": "array",
        "items": {"$ref": "#/$defs/node-0"},
        "$defs": {"node-0": {"type": "array", "items": {"$ref": "#/$defs/node-0"}}},
    }


def test_true_is_any_value_and_false_is_refused_where_it_is():
    assert converter_ready({"properties": {"a": True}}) == {"properties": {"a": {}}}
    assert converter_ready({"additionalProperties": False}) == {"additionalProperties": False}
    with pytest.raises(SchemaError, match="at `properties.b` is `false`"):
        converter_ready({"properties": {"b": False}})


@pytest.mark.parametrize(
    "schema, said",
    [
        ({"$ref": "#"}, "a `$ref` to itself"),
        ({"$ref": "other.json#/a"}, "only `#/...` is read"),
        ({"properties": {"a": {"$ref": "#/$defs/none"}}}, "points to nothing"),
    ],
)
def test_a_ref_that_means_nothing_is_refused_in_words(schema, said):
    with pytest.raises(GrammarError, match=re.escape(said)):
        schema_grammar(schema)


def chat(**fields: object):
    body = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], **fields}
    )
    return chat_request(body, {"m": "m"}, SamplingParams())


def tool(parameters: object) -> dict:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


def test_a_tool_schema_past_a_limit_is_refused_naming_it():
    with pytest.raises(ApiError) as refused:
        chat(tools=[tool({"type": "string", "maxLength": 10**6})], tool_choice="required")
    assert refused.value.param == "tools[0].function.parameters"


def test_a_required_call_of_a_tool_with_defs_is_a_request_whose_errors_name_tools():
    item = {"type": "object", "properties": {"n": {"type": "integer"}}}
    parameters = {"$defs": {"Item": item}, "properties": {"item": {"$ref": "#/$defs/Item"}}}
    request = chat(
        tools=[tool(parameters)], tool_choice={"type": "function", "function": {"name": "f"}}
    )
    assert (request.tool_choice, request.grammar_param) == ("f", "tools")
    assert "call ::=" in request.constraint(None)


def test_a_grammar_field_past_a_limit_is_refused_naming_it():
    with pytest.raises(ApiError) as refused:
        chat(grammar=nested(MAX_NESTING + 1))
    assert (refused.value.status, refused.value.param) == (400, "grammar")
    assert chat(grammar="").grammar is None  # llama-server's default: no grammar


@pytest.mark.parametrize(
    "schema, said",
    [
        ({"type": "object", "properties": 5}, "`properties` should be an object, not a number"),
        ({"properties": {"x": 3}}, "`properties` should hold only schemas"),
        ({"items": "x"}, "`items` should be an object or a boolean or an array, not a string"),
        ({"anyOf": [{"type": "string"}, 1]}, "`anyOf` should hold only schemas"),
        ({"required": [1]}, "`required` should hold only strings, not a number"),
        ({"type": "string", "maxLength": True}, "`maxLength` should be a whole number, not true"),
        ({"enum": None}, "`enum` should be an array, not null"),
        (
            {"properties": {"a": {"type": "array", "minItems": "2"}}},
            "`properties.a.minItems` should be a whole number, not a string",
        ),
    ],
)
def test_a_keyword_of_the_wrong_kind_is_named_in_json_words(schema, said):
    with pytest.raises(GrammarError) as refused:
        schema_grammar(schema)
    assert said in str(refused.value) and "attribute" not in str(refused.value)
