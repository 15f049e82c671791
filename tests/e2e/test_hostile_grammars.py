"""Hostile grammars and JSON schemas (issue 49), to `specrun serve` and `specrun run` as users
meet them: what would overflow llama.cpp's recursive grammar parser, cost minutes, or mean
nothing is refused in one line (a 400 naming the field on the server) before llama.cpp sees
it; schemas with `$defs`, `$ref` to the root and boolean schemas constrain the answer; and the
server serves on, with no traceback in its log."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from specrun.llama.grammar_limits import (
    MAX_ALTERNATIVES,
    MAX_GRAMMAR_BYTES,
    MAX_NESTING,
    MAX_REPEAT,
)
from tests.support.cli import specrun
from tests.support.server import Server

FAIL_SAFE = 120  # seconds a request may take: a limit on a broken test, not a measurement
MESSAGES = [{"role": "user", "content": "Call the tool."}]
# What overflowed the parser's stack (exit 139) or took seconds a token, each with its field.
CRASHING = {
    "a string schema of 20,000 characters": (
        {"json_schema": {"type": "string", "maxLength": 20_000}},
        "json_schema",
        f"at most {MAX_REPEAT}",
    ),
    "groups nested 20,000 deep": (
        {"grammar": "root ::= " + "(" * 20_000 + '"a"' + ")" * 20_000},
        "grammar",
        f"deeper than {MAX_NESTING} levels",
    ),
    "an array schema of 50,000 items": (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": {"type": "array", "maxItems": 50_000}},
            }
        },
        "response_format.json_schema.schema",
        f"at most {MAX_REPEAT}",
    ),
    "an enum of 20,000 values": (
        {"json_schema": {"enum": [f"value{i}" for i in range(20_000)]}},
        "json_schema",
        f"at most {MAX_ALTERNATIVES}",
    ),
    "a grammar that allows no token": (
        {"grammar": "root ::= <[999999]>"},
        "grammar",
        "allows no token",
    ),
    "a grammar with no rule": ({"grammar": " # nothing\n"}, "grammar", "defines no rule"),
    "a false schema": ({"json_schema": False}, "json_schema", "allows no value"),
}
ITEM = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
# What pydantic (and the openai SDK's pydantic_function_tool) writes for a nested model.
DEFS_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "$defs": {"Item": ITEM},
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/Item"}},
            "required": ["item"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def server(tiny_target: Path):
    running = Server("-t", str(tiny_target), "--ctx", "1024")
    yield running
    assert running.stop() == 0
    log = "".join(running.lines)
    assert "Traceback" not in log and "Exception" not in log, log


def chat(server: Server, **fields: object) -> httpx.Response:
    body = {"messages": MESSAGES, "max_tokens": 4, "temperature": 0, **fields}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=FAIL_SAFE)


@pytest.mark.parametrize("case", CRASHING)
def test_a_grammar_past_the_limits_is_a_400_naming_its_field(server, case):
    fields, param, said = CRASHING[case]
    response = chat(server, **fields)
    error = response.json()["error"]
    assert (response.status_code, error["param"], error["code"]) == (400, param, "invalid_value")
    assert said in error["message"] and "\n" not in error["message"]
    assert chat(server).status_code == 200  # the server serves on


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_grammar_with_no_way_on_mid_answer_is_the_requests_fault(server, stream):
    """After "a" this grammar allows no token at all: a 400 naming `grammar` (was: a 500, the
    server's fault), or in a stream that has begun, that error as its last event."""
    response = chat(server, grammar='root ::= "a" <[999999]>', max_tokens=8, stream=stream)
    if not stream:
        error = response.json()["error"]
        assert (response.status_code, error["param"]) == (400, "grammar"), error
        assert "allows no token" in error["message"]
        return
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "grammar"), error


def test_a_tool_schema_with_defs_constrains_a_required_call(server):
    response = chat(
        server,
        tools=[DEFS_TOOL],
        tool_choice="required",
        parallel_tool_calls=False,  # exactly one call (true lets the model make more)
        max_tokens=200,
    )
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "add"
    assert isinstance(json.loads(call["function"]["arguments"])["item"]["n"], int)


def test_a_call_to_a_tool_not_offered_reaches_the_client_as_text(server):
    """No client could run it: what the model wrote goes out as the answer's text (a grammar
    makes the model write the call)."""
    written = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    grammar = "root ::= " + json.dumps(written)
    response = chat(server, tools=[DEFS_TOOL], grammar=grammar, max_tokens=64)
    assert response.status_code == 200, response.text
    (choice,) = response.json()["choices"]
    assert choice["message"].get("tool_calls") is None and choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == written


@pytest.mark.parametrize(
    "schema",
    [
        True,
        {"type": "object", "properties": {"a": True}, "required": ["a"]},
        {"type": "object", "properties": {"n": {"type": "integer"}, "next": {"$ref": "#"}}},
        {
            "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "$ref": "#/$defs/node",
        },
    ],
    ids=["true", "a true property", "a $ref to the root", "a recursive $defs"],
)
def test_boolean_and_recursive_schemas_constrain_the_answer(server, schema):
    response = chat(server, json_schema=schema, max_tokens=64)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "content, said",
    [
        ("root ::= " + "(" * 5_000 + '"a"' + ")" * 5_000, f"deeper than {MAX_NESTING} levels"),
        ("", "defines no rule"),
        ('root ::= "a"\x00 "b"', "NUL"),
        ('root ::= "a"{0,5000}', f"at most {MAX_REPEAT}"),
        ("x" * (MAX_GRAMMAR_BYTES + 1), f"larger than {MAX_GRAMMAR_BYTES} bytes"),
    ],
    ids=["nested", "empty", "NUL", "repeated", "large"],
)
def test_the_command_line_refuses_a_hostile_grammar_in_one_line(
    tmp_path, tiny_target, content, said
):
    grammar = tmp_path / "g.gbnf"
    grammar.write_bytes(content.encode())
    run = specrun("run", "-t", str(tiny_target), "-n", "4", "--grammar", str(grammar), "hi")
    assert run.returncode == 2, run.stderr
    assert said in run.stderr and run.stderr.count("\n") == 1, run.stderr


def test_the_command_line_refuses_a_device_as_a_grammar(tiny_target):
    run = specrun("run", "-t", str(tiny_target), "-n", "4", "--grammar", "/dev/zero", "hi")
    assert (run.returncode, run.stderr) == (2, "specrun: error: grammar /dev/zero is not a file\n")


@pytest.mark.parametrize(
    "schema, said",
    [
        ('{"type": "string", "maxLength": 20000}', f"at most {MAX_REPEAT}"),
        ('{"items": ' * 5_000 + "{}" + "}" * 5_000, "nests deeper than"),
        ("true", ""),
    ],
    ids=["long string", "deep JSON", "true"],
)
def test_the_command_line_checks_a_json_schema_before_loading(tmp_path, tiny_target, schema, said):
    path = tmp_path / "s.json"
    path.write_text(schema)
    run = specrun("run", "-t", str(tiny_target), "-n", "4", "--json-schema", str(path), "hi")
    if not said:
        assert run.returncode == 0, run.stderr
        return
    assert run.returncode == 2, run.stderr
    assert said in run.stderr and run.stderr.count("\n") == 1, run.stderr
