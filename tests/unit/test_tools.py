"""Tool calls without a model: which syntax a chat template teaches, reading calls back
from an answer in each syntax, and the grammar that makes a required call."""

from __future__ import annotations

import json

import pytest

from specrun.tools import (
    CallStream,
    Tool,
    ToolCall,
    call_grammar,
    call_text,
    parse_calls,
    tool_format,
)

QWEN = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}{{ t | tojson }}"
    "{% endfor %}</tools>\nFor each call return <tool_call>...</tool_call><|im_end|>{% endif %}"
)
LLAMA3 = "{% if tools %}<|start_header_id|>ipython<|end_header_id|>{% endif %}<|python_tag|>"
MISTRAL = (
    "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]"
)
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
WEATHER = Tool(
    "get_weather",
    "The weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.mark.parametrize(
    "template, fmt",
    [
        (QWEN, "hermes"),
        (LLAMA3, "llama3"),
        (MISTRAL, "mistral"),
        (CHATML, "generic"),
        (None, "generic"),
    ],
)
def test_the_syntax_comes_from_the_template(template, fmt):
    assert tool_format(template) == fmt


@pytest.mark.parametrize("fmt", ["hermes", "llama3", "mistral", "generic"])
def test_a_call_written_in_a_syntax_reads_back(fmt):
    call = ToolCall("get_weather", json.dumps({"city": "Paris"}), "call_1")
    text, calls = parse_calls(call_text([call], fmt), fmt, [WEATHER])
    assert text == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert calls[0].id.startswith("call_") and len(calls[0].id) > 8  # a fresh id


OFFERED = [Tool("a"), Tool("b")]


def test_several_calls_text_before_them_and_what_is_not_a_call():
    answer = (
        'Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    text, calls = parse_calls(answer, "hermes", OFFERED)
    assert text == "Let me check." and [c.name for c in calls] == ["a", "b"]
    assert parse_calls("no calls here", "hermes", OFFERED) == ("no calls here", [])
    assert parse_calls("<tool_call>{not json}</tool_call>", "hermes", OFFERED)[1] == []
    llama = '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}'
    assert [c.name for c in parse_calls(llama, "llama3", OFFERED)[1]] == ["a", "b"]
    assert parse_calls('{"answer": 42}', "llama3", OFFERED) == ('{"answer": 42}', [])
    assert (
        parse_calls('Sure.[TOOL_CALLS][{"name": "a", "arguments": {}}]', "mistral", OFFERED)[0]
        == "Sure."
    )


@pytest.mark.parametrize(
    "fmt, start",
    [
        ("hermes", 'root ::= "<tool_call>\\n" call "\\n</tool_call>"'),
        ("generic", 'root ::= "<tool_call>\\n" call "\\n</tool_call>"'),
        ("mistral", 'root ::= "[TOOL_CALLS][" call "]"'),
        ("llama3", "root ::= call"),
    ],
)
def test_a_required_call_has_a_grammar_in_the_syntax(fmt, start):
    grammar = call_grammar([WEATHER, Tool("now")], "required", fmt)
    assert grammar.splitlines()[0] == start
    assert sum(line.startswith("call ::=") for line in grammar.splitlines()) == 1
    named = call_grammar([WEATHER, Tool("now")], "now", fmt)
    assert '"\\"now\\""' in named and "get_weather" not in named


def stream(fmt, pieces):
    calling = CallStream(fmt, OFFERED)
    out = [calling.feed(piece) for piece in pieces]
    return out, calling.finish()


def test_a_streamed_answer_goes_out_as_it_comes_but_for_what_may_be_a_call():
    call = ["<tool", '_call>\n{"name": "a", ', '"arguments": {"x": 1}}\n</tool_call>']
    out, (rest, calls) = stream("hermes", ["Let me ", "check. ", *call])
    assert out == ["Let me ", "check. ", "", "", ""] and rest == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("a", {"x": 1})]
    out, (rest, calls) = stream("hermes", ["It is <to", "day, <tool_call> or not"])
    assert out == ["It is ", "<today, "] and rest == "<tool_call> or not" and calls == []
    out, (rest, calls) = stream("llama3", [" {", '"name": "a", "parameters": {}}'])
    assert out == ["", ""] and rest == "" and [c.name for c in calls] == ["a"]
    out, (rest, calls) = stream("llama3", ["Sure", ", here"])
    assert out == ["Sure", ", here"] and (rest, calls) == ("", [])
    out, (rest, calls) = stream("mistral", ["[TOOL", "S]", "x"])
    assert out == ["", "[TOOLS]", "x"] and (rest, calls) == ("", [])


def defs_tool(name: str, item: dict) -> Tool:
    """A tool as pydantic writes one whose parameters hold a nested model: in `$defs`."""
    return Tool(
        name,
        parameters={
            "$defs": {"Item": item},
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/Item"}},
            "required": ["item"],
        },
    )


def test_a_required_call_keeps_each_tools_own_defs():
    number = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    text = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}
    grammar = call_grammar([defs_tool("add", number), defs_tool("say", text)], "required", "hermes")
    kv_rules = " ".join(line for line in grammar.splitlines() if "-kv ::=" in line)
    assert '"\\"n\\"" j0-space ":" j0-space j0-integer' in kv_rules  # the two Items, each its own
    assert '"\\"s\\"" j1-space ":" j1-space j1-string' in kv_rules


def test_a_call_to_a_function_not_offered_is_text():
    answer = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    assert parse_calls(answer, "hermes", [WEATHER]) == (answer, [])
    text, calls = parse_calls(answer.replace("rm_rf", "get_weather"), "hermes", [WEATHER])
    assert (text, [call.name for call in calls]) == ("", ["get_weather"])
    held = CallStream("hermes", [WEATHER])
    assert held.feed(answer) == "" and held.finish() == (answer, [])
