"""Exactness across the API families: one greedy conversation sent through chat completions,
Anthropic's Messages, OpenAI's Responses and Ollama's chat, each by its own client, to one
`specrun serve` whose target drafts, gives one text, whole and streamed; and that text is
plain decoding's (the same weights served again without a draft)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import ollama
import openai
import pytest

from tests.support.server import Server

TOKENS = 24
SYSTEM = "the sun and the moon"
TURNS: list[Any] = [
    {"role": "user", "content": "the sea"},
    {"role": "assistant", "content": "a big red dog"},
    {"role": "user", "content": "and the tree"},
]
CONVERSATION: list[Any] = [{"role": "system", "content": SYSTEM}, *TURNS]


@pytest.fixture(scope="module")
def server(
    tiny_target: Path, tiny_draft: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    plain = tmp_path_factory.mktemp("families") / "plain.gguf"  # the target, without a draft
    shutil.copyfile(tiny_target, plain)
    running = Server(
        "-t", str(tiny_target), "-d", str(tiny_draft), "--gamma", "3",
        "--model", str(plain), "--parallel", "1",
    )  # fmt: skip
    yield running
    assert running.stop() == 0


def chat_completions(server: Server, stream: bool) -> str:
    asked: dict[str, Any] = dict(
        model="target", messages=CONVERSATION, temperature=0, max_tokens=TOKENS
    )
    client = server.client()
    if not stream:
        answer = client.chat.completions.create(**asked)
        assert answer.model_extra and answer.model_extra["specrun"]["drafted"] > 0
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(**asked, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def messages(server: Server, stream: bool) -> str:
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
    asked: dict[str, Any] = dict(
        model="target",
        system=SYSTEM,
        messages=TURNS,
        max_tokens=TOKENS,
        extra_body={"temperature": 0},  # the SDK declares no sampling fields; the API takes them
    )
    if not stream:
        answer = client.messages.create(**asked)
        return "".join(block.text for block in answer.content if block.type == "text")
    with client.messages.stream(**asked) as events:
        return "".join(events.text_stream)


def responses(server: Server, stream: bool) -> str:
    asked: dict[str, Any] = dict(
        model="target",
        instructions=SYSTEM,
        input=TURNS,
        temperature=0,
        max_output_tokens=TOKENS,
        store=False,
    )
    client = server.client()
    if not stream:
        answer: openai.types.responses.Response = client.responses.create(**asked)
        return answer.output_text
    events = client.responses.create(**asked, stream=True)
    return "".join(event.delta for event in events if event.type == "response.output_text.delta")


def ollama_chat(server: Server, stream: bool) -> str:
    client = ollama.Client(host=server.url, timeout=60)
    asked: dict[str, Any] = dict(
        model="target", messages=CONVERSATION, options={"temperature": 0, "num_predict": TOKENS}
    )
    if not stream:
        return client.chat(**asked).message.content or ""
    parts = client.chat(**asked, stream=True)
    return "".join(part.message.content or "" for part in parts)


FAMILIES: dict[str, Callable[[Server, bool], str]] = {
    "chat completions": chat_completions,
    "messages": messages,
    "responses": responses,
    "ollama chat": ollama_chat,
}


def test_one_greedy_conversation_is_one_text_through_every_family(server: Server) -> None:
    plain = server.client().chat.completions.create(
        model="plain", messages=CONVERSATION, temperature=0, max_tokens=TOKENS
    )
    expected = plain.choices[0].message.content
    assert expected and plain.usage and plain.usage.completion_tokens == TOKENS
    answers = {
        (family, stream): ask(server, stream)
        for family, ask in FAMILIES.items()
        for stream in (False, True)
    }
    assert answers == dict.fromkeys(answers, expected)
