"""The real chat templates of the models people run (tests/support/templates), each in a tiny
GGUF with its model's added tokens: specrun's prompt rendering writes a conversation (a system
message, tools, a call and its result) as the template does, its markup as special tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specrun.core.text import Detokenizer
from specrun.llama.model import Model
from specrun.prompt import Message, chat_text, render
from specrun.tools import Tool, ToolCall
from tests.support.tinymodels import TEMPLATE_MODELS, write_template_model

WEATHER = Tool(
    "get_weather", "The weather", {"type": "object", "properties": {"city": {"type": "string"}}}
)
CALL = ToolCall("get_weather", json.dumps({"city": "Paris"}), "call_1")
CONVERSATION = [
    Message("system", "be brief"),
    Message("user", "the weather in paris"),
    Message("assistant", "", tool_calls=(CALL,)),
    Message("tool", "sunny", tool_call_id="call_1"),
]
# How each template opens the assistant's turn (the end of the generation prompt), and a
# special token of its own that the prompt must hold as one token.
ENDINGS = {
    "qwen3": ("<|im_start|>assistant\n", "<|im_start|>"),
    "qwen3-coder": ("<|im_start|>assistant\n", "<|im_start|>"),
    "glm-4.5": ("<|assistant|>", "<|assistant|>"),
    "gpt-oss": ("<|start|>assistant", "<|message|>"),
    # llama.cpp's copy closes the thought unless enable_thinking is true
    "deepseek-r1": ("<｜Assistant｜><think>\n</think>", "<｜Assistant｜>"),
    "deepseek-v3.1": ("<｜Assistant｜><think></think>", "<｜Assistant｜>"),
    "kimi-k2": ("<|im_assistant|>assistant<|im_middle|>", "<|im_middle|>"),
    "llama-3.1": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("templates")
    return {name: write_template_model(folder / f"{name}.gguf", name) for name in TEMPLATE_MODELS}


def shown(model: Model, tokens: list[int]) -> str:
    """The prompt's text, special tokens as their text."""
    return b"".join(  # bytes first: a character may take several byte tokens
        model.token_text(t).encode() if model.is_special(t) else model.piece(t) for t in tokens
    ).decode()


@pytest.mark.parametrize("name", sorted(TEMPLATE_MODELS))
def test_each_real_template_renders_a_conversation_with_tools(models, name):
    ending, special = ENDINGS[name]
    with Model(models[name], n_ctx=1024) as model:
        text = chat_text(model, CONVERSATION[:2])
        assert text.endswith(ending) and "be brief" in text and "the weather in paris" in text
        tokens = render(model, CONVERSATION, (WEATHER,))
        assert (
            model.tokenize(special, add_special=False, parse_special=True)
            == [t for t in tokens if model.token_text(t) == special][:1]
        )
        rendered = shown(model, tokens)
    assert "get_weather" in rendered and "Paris" in rendered and "sunny" in rendered


@pytest.mark.parametrize(
    ("name", "marker"),
    [
        ("qwen3", "<think>"),
        ("deepseek-r1", "<｜tool▁calls▁begin｜>"),
        ("gpt-oss", "<|channel|>"),
        ("glm-4.5", "<arg_key>"),
        ("kimi-k2", "<|tool_call_begin|>"),
    ],
)
def test_a_models_added_tokens_are_one_token_each(models, name, marker):
    with Model(models[name], n_ctx=256) as model:
        tokens = model.tokenize(marker, add_special=False, parse_special=True)
        assert len(tokens) == 1 and model.is_special(tokens[0])


@pytest.mark.parametrize(
    ("name", "markers"),
    [
        ("qwen3", ["<think>", "</think>"]),
        ("deepseek-r1", ["</think>"]),
        ("glm-4.5", ["<think>", "</think>"]),
        ("gpt-oss", ["<|channel|>", "<|message|>", "<|end|>", "<|start|>"]),
    ],
)
def test_the_markers_of_a_reasoning_answer_reach_its_text(models, name, markers):
    """The reasoning splitter reads the answer's text: each marker, generated as its one
    token, is there as its text (Harmony's though they look special: llama.cpp renders them)."""
    with Model(models[name], n_ctx=256) as model:
        detokenizer = Detokenizer(model)
        for marker in markers:
            [token] = model.tokenize(marker, add_special=False, parse_special=True)
            assert detokenizer.add(token) == marker
