"""Reasoning models through the real server: a tiny model with Qwen3's real chat template
thinks (a grammar makes it write `<think>...</think>` then an answer), and chat completions
give its thinking as `reasoning_content`, whole and streamed, the same with a draft as without;
a raw completion's text is never split. The request side: `developer`, `chat_template_kwargs`
and `reasoning_effort`, and their 400s."""

from __future__ import annotations

import shutil

import httpx
import openai
import pytest

from tests.support.server import Server
from tests.support.tinymodels import write_template_model

# The thought and the answer in the tiny vocabulary's words, as Qwen3 writes them.
THINKING = 'root ::= "<think>\\n" [a-z ]{4,24} "\\n</think>\\n\\n" [a-z ]{4,24}'
ASKED = [{"role": "user", "content": "the sea"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """Qwen3's template with a draft (the served default), the same model without one
    (`qwen3-plain`), and Llama 3.1's template, which does not think (`llama`)."""
    folder = tmp_path_factory.mktemp("reasoning")
    qwen3 = write_template_model(folder / "qwen3.gguf", "qwen3")
    draft = write_template_model(folder / "qwen3-draft.gguf", "qwen3", noise=0.1)
    plain = shutil.copy(qwen3, folder / "qwen3-plain.gguf")
    llama = write_template_model(folder / "llama.gguf", "llama-3.1")
    running = Server(
        *("-t", str(qwen3), "-d", str(draft), "--gamma", "3", "--temp", "0"),
        *("--model", str(plain), "--model", str(llama), "--parallel", "1"),
    )
    yield running
    assert running.stop() == 0


def ask(server: Server, model: str = "qwen3", **extra: object):
    return server.client().chat.completions.create(
        model=model, messages=ASKED, max_tokens=40, extra_body={"grammar": THINKING, **extra}
    )


def test_thinking_is_reasoning_content_and_the_answer_is_content(server):
    message = ask(server).choices[0].message
    reasoning = message.model_extra["reasoning_content"]
    assert reasoning and message.content
    assert "<think>" not in reasoning + message.content
    assert "</think>" not in reasoning + message.content
    assert reasoning == reasoning.strip() and message.content == message.content.lstrip()


def test_streamed_reasoning_and_content_are_the_whole_answers(server):
    whole = ask(server).choices[0].message
    stream = server.client().chat.completions.create(
        model="qwen3",
        messages=ASKED,
        max_tokens=40,
        stream=True,
        extra_body={"grammar": THINKING},
    )
    reasoning, content, order = "", "", []
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        if thought := (delta.model_extra or {}).get("reasoning_content"):
            reasoning += thought
            order.append("reasoning")
        if delta.content:
            content += delta.content
            order.append("content")
    assert (reasoning, content) == (whole.model_extra["reasoning_content"], whole.content)
    assert order == sorted(order, reverse=True)  # all the thinking before any answer


def test_speculation_does_not_change_the_answer(server):
    drafted, plain = ask(server), ask(server, model="qwen3-plain")
    assert drafted.model_extra["specrun"]["drafted"] > 0
    assert drafted.choices[0].message == plain.choices[0].message
    assert drafted.usage.completion_tokens == plain.usage.completion_tokens


def test_a_raw_completion_is_never_split(server):
    answer = server.client().completions.create(
        model="qwen3",
        prompt="<|im_start|>user\nthe sea<|im_end|>\n<|im_start|>assistant\n",
        max_tokens=40,
        extra_body={"grammar": THINKING},
    )
    text = answer.choices[0].text
    assert text.startswith("<think>\n") and "\n</think>\n\n" in text


def test_template_kwargs_reach_the_template(server):
    on, off = ask(server), ask(server, chat_template_kwargs={"enable_thinking": False})
    # Qwen3's template writes an empty thought into the prompt where thinking is off
    assert off.usage.prompt_tokens > on.usage.prompt_tokens
    assert ask(server, reasoning_effort="none").usage.prompt_tokens == off.usage.prompt_tokens
    assert ask(server, reasoning_effort="high").choices[0].message == on.choices[0].message


def test_developer_is_the_templates_system_role(server):
    def prompt_tokens(role: str) -> int:
        return (
            server.client()
            .chat.completions.create(
                model="qwen3",
                messages=[{"role": role, "content": "be brief"}, *ASKED],
                max_tokens=1,
            )
            .usage.prompt_tokens
        )

    assert prompt_tokens("developer") == prompt_tokens("system")


@pytest.mark.parametrize(
    ("model", "extra", "field"),
    [
        ("llama", {"reasoning_effort": "high"}, "reasoning_effort"),
        ("qwen3", {"reasoning_effort": "extreme"}, "reasoning_effort"),
        ("qwen3", {"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
        ("qwen3", {"chat_template_kwargs": "enable_thinking"}, "chat_template_kwargs"),
    ],
)
def test_what_a_model_cannot_do_is_a_400_naming_the_field(server, model, extra, field):
    with pytest.raises(openai.BadRequestError) as refused:
        ask(server, model=model, **extra)
    error = refused.value.body
    assert refused.value.status_code == 400 and error["param"] == field, error
    assert f"`{field}`" in error["message"]


def test_a_model_that_does_not_think_answers_as_before(server):
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "llama", "messages": ASKED, "max_tokens": 8},
        timeout=60,
    ).json()
    assert "reasoning_content" not in response["choices"][0]["message"]
