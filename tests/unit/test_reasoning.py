"""Reasoning split from the answer on the exact strings reasoning models emit, fed whole and
in odd chunk sizes, and the format read from the real templates."""

from __future__ import annotations

import pytest

from specrun.errors import OptionError
from specrun.reasoning import (
    HarmonySplitter,
    Piece,
    Splitter,
    ThinkSplitter,
    reasoning_format,
    splitter,
    template_options,
)
from tests.support.tinymodels import TEMPLATE_MODELS, TEMPLATES

QWEN3 = "<think>\nThe user greets me. I greet back.\n</think>\n\nHello! How can I help?"
# The R1 distill's prompt ends `<｜Assistant｜><think>\n`: its answer starts inside the thought.
R1 = "Okay, 2 + 2 is 4.\n</think>\n\nThe answer is **4**."
GLM = "\n<think>The user wants the weather.</think>\nIt is sunny in Paris."
HARMONY = (
    "<|channel|>analysis<|message|>User asks for 2+2. Answer 4.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4."
)
HARMONY_CALL = (
    "<|channel|>analysis<|message|>Need the weather tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris"}'
)


def split(feeder: Splitter, text: str, size: int) -> tuple[str, str, list[Piece]]:
    """The reasoning and the content, fed in chunks of `size`; every piece, in order."""
    pieces: list[Piece] = []
    for start in range(0, len(text), size):
        pieces += feeder.feed(text[start : start + size])
    pieces += feeder.finish()
    reasoning = "".join(t for kind, t in pieces if kind == "reasoning")
    content = "".join(t for kind, t in pieces if kind == "content")
    return reasoning, content, pieces


SIZES = [1, 2, 3, 5, 7, 1000]


@pytest.mark.parametrize("size", SIZES)
def test_qwen3s_thought_is_split_from_its_answer(size):
    reasoning, content, pieces = split(ThinkSplitter(), QWEN3, size)
    assert reasoning == "The user greets me. I greet back."
    assert content == "Hello! How can I help?"
    # no answer text before the thought has ended, nor any marker's text anywhere
    assert [kind for kind, _ in pieces] == sorted(kind for kind, _ in pieces)[::-1]
    assert not any("<" in t or ">" in t for _, t in pieces)


@pytest.mark.parametrize("size", SIZES)
def test_a_prompt_that_opens_the_thought_starts_the_answer_inside_it(size):
    feeder = splitter("think", "<｜User｜>2+2?<｜Assistant｜><think>\n")
    assert split(feeder, R1, size)[:2] == ("Okay, 2 + 2 is 4.", "The answer is **4**.")


@pytest.mark.parametrize("size", SIZES)
def test_glm_45s_thought(size):
    reasoning, content, _ = split(ThinkSplitter(), GLM, size)
    assert (reasoning, content) == ("The user wants the weather.", "It is sunny in Paris.")


@pytest.mark.parametrize("size", SIZES)
def test_an_answer_without_a_thought_is_content_as_it_is(size):
    text = "  Hello <b>there</b>, see </think> here"
    assert split(ThinkSplitter(), text, size)[:2] == ("", text)


def test_a_thought_cut_off_by_max_tokens_is_reasoning():
    assert split(ThinkSplitter(), "<think>\nLet me see, the ans", 4)[:2] == (
        "Let me see, the ans",
        "",
    )


def test_only_a_possible_tag_is_held_back():
    feeder = ThinkSplitter(thinking=True)
    assert feeder.feed("step one</th") == [("reasoning", "step one")]
    assert feeder.feed("inking") == [("reasoning", "</thinking")]  # not the tag after all
    assert feeder.feed("</think>\n\nDone") == [("content", "Done")]


@pytest.mark.parametrize("size", SIZES)
def test_harmony_analysis_is_reasoning_and_final_is_content(size):
    reasoning, content, _ = split(HarmonySplitter(), HARMONY, size)
    assert (reasoning, content) == ("User asks for 2+2. Answer 4.", "2 + 2 = 4.")


@pytest.mark.parametrize("size", SIZES)
def test_a_harmony_tool_call_is_left_whole_for_the_call_reader(size):
    reasoning, content, _ = split(HarmonySplitter(), HARMONY_CALL, size)
    assert reasoning == "Need the weather tool."
    assert content == (
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris"}'
    )


def test_harmony_without_its_markup_is_content():
    assert split(HarmonySplitter(), "just text", 3)[:2] == ("", "just text")


@pytest.mark.parametrize(
    ("name", "form"),
    [
        ("qwen3", "think"),
        ("deepseek-r1", "think"),
        ("deepseek-v3.1", "think"),
        ("glm-4.5", "think"),
        ("gpt-oss", "harmony"),
        ("qwen3-coder", "none"),
        ("kimi-k2", "none"),
        ("llama-3.1", "none"),
    ],
)
def test_the_format_is_read_from_the_real_template(name, form):
    template = (TEMPLATES / TEMPLATE_MODELS[name].file).read_text(encoding="utf-8")
    assert reasoning_format(template) == form


def test_an_effort_goes_to_a_reasoning_template_and_is_refused_by_others():
    gpt_oss = (TEMPLATES / TEMPLATE_MODELS["gpt-oss"].file).read_text(encoding="utf-8")
    llama = (TEMPLATES / TEMPLATE_MODELS["llama-3.1"].file).read_text(encoding="utf-8")
    options = template_options(gpt_oss, "gpt-oss", {"builtin_tools": []}, effort="high")
    assert options == {"builtin_tools": [], "reasoning_effort": "high"}
    assert template_options(llama, "llama", {"x": 1}, thinking=False) == {
        "x": 1,
        "enable_thinking": False,
    }
    with pytest.raises(OptionError, match="^`reasoning_effort`"):
        template_options(llama, "llama", {}, effort="low")
    with pytest.raises(OptionError, match="^`think`"):
        template_options(llama, "llama", {}, thinking=True, thinking_field="think")
    with pytest.raises(OptionError, match="^`chat_template_kwargs` may not set `messages`"):
        template_options(gpt_oss, "gpt-oss", {"messages": []})
