"""Tools in the prompt, as the chat template writes them: a template that renders `tools`,
calls and results itself gets them as Hugging Face templates take them; one that does not
gets the tools in a system message and calls in Hermes' syntax."""

from __future__ import annotations

import json

import pytest

from specrun.llama.model import Model
from specrun.prompt import Message, chat_text, render
from specrun.tools import Tool, ToolCall
from tests.support.tinymodels import write_tiny_model

# Qwen 2.5's way, cut down: tools in the system turn, calls in <tool_call> tags with the
# arguments as an object, results in a tool turn.
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}"
    "</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ {'name': c.function.name, "
    "'arguments': c.function.arguments} | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = Tool(
    "get_weather", "The weather", {"type": "object", "properties": {"city": {"type": "string"}}}
)
CALL = ToolCall("get_weather", json.dumps({"city": "Paris"}), "call_1")
CONVERSATION = [
    Message("user", "the weather in paris"),
    Message("assistant", "", tool_calls=(CALL,)),
    Message("tool", "sunny", tool_call_id="call_1"),
]


@pytest.fixture(scope="module")
def hermes(tmp_path_factory):
    path = write_tiny_model(
        tmp_path_factory.mktemp("tools") / "hermes.gguf", chat_template=HERMES_TEMPLATE
    )
    with Model(path, n_ctx=512) as model:
        yield model


def test_a_template_with_tools_renders_them_itself(hermes):
    text = chat_text(hermes, CONVERSATION)
    assert "<tools>" not in text  # chat_text has no tools: only render passes them
    tokens = render(hermes, CONVERSATION, (WEATHER,))
    rendered = "".join(hermes.piece(t).decode("utf-8", "replace") for t in tokens)
    assert '"name": "get_weather"' in rendered and "The weather" in rendered
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}' in rendered
    assert "tool\nsunny" in rendered


def test_a_template_without_tools_gets_them_in_a_system_message(tiny_target):
    with Model(tiny_target, n_ctx=512) as model:
        tokens = render(model, CONVERSATION, (WEATHER,))
        rendered = "".join(model.piece(t).decode("utf-8", "replace") for t in tokens)
    assert rendered.index("<tools>") < rendered.index("the weather in paris")
    assert '"name": "get_weather"' in rendered
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in (
        rendered
    )
    assert "<tool_response>\nsunny\n</tool_response>" in rendered
