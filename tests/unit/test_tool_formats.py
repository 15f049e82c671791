"""The tool-call syntaxes beyond the JSON ones, on the exact strings their models write (from
llama.cpp's tests/test-chat.cpp) and the real chat templates (tests/support/templates): which
syntax each template teaches, the calls read back with their arguments typed by the schema,
a streamed answer held only from where a call starts, earlier calls written back, and the
grammar of a forced call."""

from __future__ import annotations

import json

import pytest

from specrun.tools import (
    CallStream,
    Tool,
    ToolCall,
    call_grammar,
    call_text,
    describes_tools,
    parse_calls,
    renders_calls,
    tool_format,
)
from tests.support.tinymodels import TEMPLATE_MODELS, TEMPLATES

SPECIAL = Tool(
    "special_function",
    "I'm special",
    {"type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]},
)
OPTIONAL = Tool(
    "special_function_with_opt",
    parameters={
        "type": "object",
        "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}},
        "required": ["arg1"],
    },
)
TIME = Tool(
    "get_time",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
WEATHER = Tool("get_weather", parameters=TIME.parameters)
EDIT = Tool(
    "edit",
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "count": {"type": "integer"},
            "text": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["path"],
    },
)
TOOLS = [SPECIAL, OPTIONAL, TIME, WEATHER, EDIT]


def template(name: str) -> str:
    return (TEMPLATES / TEMPLATE_MODELS[name].file).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "model, fmt, describes, renders",
    [
        ("qwen3", "hermes", True, True),
        ("qwen3-coder", "qwen3-coder", True, True),
        ("glm-4.5", "glm", True, True),
        ("gpt-oss", "harmony", True, True),
        ("deepseek-r1", "deepseek-r1", False, True),
        ("deepseek-v3.1", "deepseek-v3.1", False, True),
        ("kimi-k2", "kimi-k2", True, True),
        ("llama-3.1", "llama3", True, True),
    ],
)
def test_each_real_template_teaches_its_syntax(model, fmt, describes, renders):
    text = template(model)
    assert tool_format(text) == fmt
    assert (describes_tools(text), renders_calls(text)) == (describes, renders)


def calls_of(answer: str, fmt: str, tools=TOOLS) -> tuple[str, list[tuple[str, object]]]:
    text, calls = parse_calls(answer, fmt, tools)
    return text, [(call.name, json.loads(call.arguments)) for call in calls]


# (syntax, what the model wrote, the text before the calls, the calls), each string as
# llama.cpp's tests have the model write it.
WRITTEN = [
    (
        "glm",
        "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n"
        "</tool_call>",
        "",
        [("special_function", {"arg1": 1})],
    ),
    (
        "glm",
        "Let me see.<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value>"
        "</tool_call><tool_call>special_function_with_opt<arg_key>arg1</arg_key><arg_value>1"
        "</arg_value><arg_key>arg2</arg_key><arg_value>2</arg_value></tool_call>",
        "Let me see.",
        [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})],
    ),
    (
        "qwen3-coder",
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
        "</function>\n</tool_call>",
        "",
        [("special_function", {"arg1": 1})],
    ),
    (
        "qwen3-coder",
        "I'll edit it.\n<tool_call>\n<function=edit>\n<parameter=path>\n42\n</parameter>\n"
        "<parameter=text>\nline 1\n\nline <3\n</parameter>\n<parameter=count>\n3\n</parameter>\n"
        '<parameter=tags>\n["a", "b"]\n</parameter>\n</function>\n</tool_call>',
        "I'll edit it.",
        [("edit", {"path": "42", "text": "line 1\n\nline <3", "count": 3, "tags": ["a", "b"]})],
    ),
    (
        "deepseek-r1",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "",
        [("special_function", {"arg1": 1})],
    ),
    (
        "deepseek-v3.1",
        'CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": '
        '"Paris"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": '
        '"Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "CONTENT",
        [("get_time", {"city": "Paris"}), ("get_weather", {"city": "Paris"})],
    ),
    (
        "kimi-k2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0"
        '<|tool_call_argument_begin|>{"arg1": 1}<|tool_call_end|><|tool_call_begin|>'
        'functions.special_function_with_opt:1<|tool_call_argument_begin|>{"arg1": 1, "arg2": 2}'
        "<|tool_call_end|><|tool_calls_section_end|>",
        "",
        [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})],
    ),
    (
        "harmony",
        '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}',
        "",
        [("special_function", {"arg1": 1})],
    ),
    (
        "harmony",
        "<|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json"
        '<|message|>{"path": "a.py", "count": 2}',
        "",
        [("edit", {"path": "a.py", "count": 2})],
    ),
    (
        "harmony",
        ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
        "",
        [("special_function", {"arg1": 1})],
    ),
]


@pytest.mark.parametrize("fmt, answer, before, calls", WRITTEN)
def test_calls_read_back_from_what_the_models_write(fmt, answer, before, calls):
    assert calls_of(answer, fmt) == (before, calls)


def test_kimi_keeps_its_call_ids_which_its_template_writes_back():
    answer = WRITTEN[6][1]
    assert [c.id for c in parse_calls(answer, "kimi-k2", TOOLS)[1]] == [
        "functions.special_function:0",
        "functions.special_function_with_opt:1",
    ]


@pytest.mark.parametrize(
    "fmt, answer",
    [
        (
            "glm",
            "<tool_call>rm_rf\n<arg_key>path</arg_key>\n<arg_value>/</arg_value>\n</tool_call>",
        ),
        (
            "deepseek-v3.1",
            "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{not json<｜tool▁call▁end｜>",
        ),
        ("kimi-k2", "<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>[1]"),
        ("harmony", "<|channel|>commentary to=functions.get_time<|message|>hello"),
        ("qwen3-coder", "<tool_call>\nno function here\n</tool_call>"),
    ],
)
def test_what_is_not_a_call_of_an_offered_tool_is_text(fmt, answer):
    assert parse_calls(answer, fmt, TOOLS) == (answer, [])


CALLS = [
    ToolCall("edit", json.dumps({"path": "a b", "count": 2, "tags": ["x"]}), "call_1"),
    ToolCall("get_time", json.dumps({"city": "Paris"}), "call_2"),
]


@pytest.mark.parametrize(
    "fmt", ["glm", "qwen3-coder", "deepseek-r1", "deepseek-v3.1", "kimi-k2", "hermes", "mistral"]
)
def test_earlier_calls_written_in_a_syntax_read_back(fmt):
    _, calls = calls_of(call_text(CALLS, fmt), fmt)
    assert calls == [(c.name, json.loads(c.arguments)) for c in CALLS]


def test_harmony_writes_one_call_a_message():
    written = call_text(CALLS[1:], "harmony")
    assert written == (
        "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
    )
    assert calls_of(written, "harmony")[1] == [("get_time", {"city": "Paris"})]


def stream(fmt: str, pieces: list[str], most: int | None = None):
    calling = CallStream(fmt, TOOLS, most)
    return [calling.feed(piece) for piece in pieces], calling.finish()


@pytest.mark.parametrize(
    "fmt, call",
    [
        ("glm", WRITTEN[0][1]),
        ("qwen3-coder", WRITTEN[2][1]),
        ("deepseek-r1", WRITTEN[4][1]),
        ("kimi-k2", WRITTEN[6][1]),
        ("harmony", WRITTEN[8][1]),
    ],
)
def test_a_streamed_answer_is_held_only_from_where_a_call_starts(fmt, call):
    pieces = ["Sure", ", here.\n"] + [call[i : i + 3] for i in range(0, len(call), 3)]
    out, (rest, calls) = stream(fmt, pieces)
    assert "".join(out) == "Sure, here.\n" and out[:2] == ["Sure", ", here.\n"]
    assert rest == "" and calls
    # A start's beginning is held, and goes out once it is not one.
    out, (rest, calls) = stream(fmt, ["a " + call[:2], "!x"])
    assert out == ["a ", call[:2] + "!x"] and (rest, calls) == ("", [])


def test_without_parallel_calls_an_answer_keeps_its_first_call():
    answer = WRITTEN[1][1]
    _, (rest, calls) = stream("glm", [answer], most=1)
    assert rest == "" and [c.name for c in calls] == ["special_function"]
    _, (rest, calls) = stream("glm", [answer])
    assert len(calls) == 2


FORMATS = ["glm", "qwen3-coder", "deepseek-r1", "deepseek-v3.1", "kimi-k2", "harmony"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_forced_call_has_a_grammar_of_one_or_several(fmt):
    one = call_grammar([TIME, EDIT], "required", fmt)
    several = call_grammar([TIME, EDIT], "required", fmt, several=True)
    assert (one == several) == (fmt == "harmony")  # Harmony: one call ends the answer
    assert sum(line.startswith("root ::=") for line in several.splitlines()) == 1
    named = call_grammar([TIME, EDIT], "edit", fmt)
    assert "edit" in named and "get_time" not in named


@pytest.mark.parametrize("fmt", ["glm", "qwen3-coder"])
def test_a_tagged_grammar_writes_strings_bare_and_other_values_as_json(fmt):
    grammar = call_grammar([EDIT], "required", fmt)
    call_line = next(line for line in grammar.splitlines() if line.startswith("call ::="))
    # path and text are strings: text up to the closing tag; count and tags: JSON rules.
    assert call_line.count("[^<]") == 2 and call_line.count("-root") == 2
    assert call_line.index("path") < call_line.index("count")  # the required first
