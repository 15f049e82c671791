"""Tool calls: the tools a conversation offers the model, how its chat template is told of
them, and how its answer is read back as calls.

Each tool-call syntax is one entry of a table (`formats.py`), from llama.cpp's own in
`common/chat.cpp`: Hermes' (`<tool_call>{...}</tool_call>`, Qwen 2.5 and Qwen3), Llama 3.x's
bare JSON, Mistral's `[TOOL_CALLS]`, GLM-4.5's `<arg_key>`/`<arg_value>` tags, Qwen3-Coder's
`<function=...>`/`<parameter=...>` XML, gpt-oss's Harmony channels, DeepSeek-R1's and V3.1's
and Kimi-K2's special-token markers. Each says how a template shows it is the one, where an
answer's calls start (a streamed answer holds only from there), how to read them (arguments
written as tagged text typed back to JSON by the tool's schema), how to write earlier calls
for a template that does not, and the grammar of a forced call.

A template that renders `tools` itself gets them as Hugging Face templates take them. One
that does not gets them in a system message, with its own syntax asked for (DeepSeek's), or
Hermes' where it has none (SmolLM2's), and, where it cannot render calls either, earlier calls
in that syntax and tool results as user turns in `<tool_response>` tags. `tool_choice`
required or a named function is enforced by a grammar of the syntax over the tools' schemas
(one call, or one or more where `parallel_tool_calls` allows), so even a small model answers
with calls that parse against them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from specrun.tools.calls import Tool, ToolCall, ToolChoice
from specrun.tools.formats import FORMATS, describes_tools, renders_calls, tool_format
from specrun.tools.gbnf import Rules
from specrun.tools.stream import CallStream, parse_calls
from specrun.tools.syntax import ToolFormat

__all__ = [
    "CallStream",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolFormat",
    "call_grammar",
    "call_text",
    "describes_tools",
    "parse_calls",
    "renders_calls",
    "system_text",
    "tool_format",
]


def system_text(tools: Sequence[Tool], fmt: ToolFormat = "generic") -> str:
    """The system message that tells a template without tools of them, in the syntax `fmt`
    (Hermes' wording)."""
    listed = "\n".join(json.dumps(tool.as_openai()["function"]) for tool in tools)
    how = "as JSON in these tags" if fmt in ("generic", "hermes") else "in this form"
    return (
        "You may call one or more functions to answer. The functions, as JSON schemas:\n"
        f"<tools>\n{listed}\n</tools>\n"
        f"To call one, answer with its name and arguments {how}:\n{FORMATS[fmt].example}"
    )


def call_text(calls: Sequence[ToolCall], fmt: ToolFormat) -> str:
    """A turn's calls as the model writes them, for a template that cannot render
    `tool_calls`."""
    return FORMATS[fmt].write(calls)


def call_grammar(
    tools: Sequence[Tool], choice: ToolChoice, fmt: ToolFormat, several: bool = False
) -> str:
    """GBNF for an answer that is calls (of the tool named by `choice`, or of any): one, or
    with `several`, one or more, in the syntax of `fmt` with arguments that the tool's
    parameter schema allows. Each schema keeps its own `$defs`."""
    syntax = FORMATS[fmt]
    rules = Rules()
    root = syntax.root(several, rules)
    chosen = [syntax.call_rule(tool, rules) for tool in tools if choice in ("required", tool.name)]
    return f"root ::= {root}\ncall ::= {' | '.join(chosen)}\n" + rules.text()
