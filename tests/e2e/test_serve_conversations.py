"""Long conversations through `specrun serve`: a conversation longer than the context is
answered, its oldest exchanges dropped and counted, as plain decoding of what is left; a
conversation that comes back after others took its slot restores its prompt from host memory
(--cache-ram) and evaluates only what is new."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.server import Server

LINE = "hello world the cat is blue and the dog is red and the sun is big"
DEADLINE = 120  # seconds: a fail-safe for a request that never ends, not a measurement


@pytest.fixture(scope="module")
def server(tiny_target: Path, tiny_draft: Path):
    running = Server(
        "-t", str(tiny_target), "-d", str(tiny_draft), "--gamma", "3", "--ctx", "160",
        "--parallel", "2", "--cache-ram", "16", "--temp", "0",
    )  # fmt: skip
    yield running
    assert running.stop() == 0


def ask(server: Server, messages: list[dict[str, str]], max_tokens: int = 8) -> dict:
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": server.model, "messages": messages, "max_tokens": max_tokens},
        timeout=DEADLINE,
    )
    assert response.status_code == 200, response.text
    return response.json()


def exchanges(n: int) -> list[dict[str, str]]:
    turns = [[{"role": "user", "content": f"{i} {LINE}"}, {"role": "assistant", "content": LINE}]
             for i in range(n)]  # fmt: skip
    return [message for turn in turns for message in turn]


def test_a_conversation_longer_than_the_context_is_truncated_and_says_so(server):
    system = [{"role": "system", "content": "be brief"}]
    last = [{"role": "user", "content": "the moon"}]
    long = ask(server, system + exchanges(8) + last)
    dropped = long["specrun"]["dropped_messages"]
    assert dropped > 0 and dropped % 2 == 0  # whole exchanges
    # What it answered is what the conversation left after the drop gets: plain decoding.
    kept = ask(server, system + exchanges(8)[dropped:] + last)
    assert kept["specrun"]["dropped_messages"] == 0
    assert kept["choices"][0]["message"] == long["choices"][0]["message"]


def test_a_message_longer_than_the_context_is_a_400_naming_messages(server):
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": server.model, "messages": [{"role": "user", "content": LINE * 20}]},
        timeout=DEADLINE,
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "messages" and error["code"] == "context_length_exceeded"
    assert "the last message is" in error["message"]


def test_a_returning_conversation_restores_its_prompt(server):
    first = [{"role": "user", "content": LINE}]
    answer = ask(server, first, max_tokens=6)
    for other in ("the road and the tree", "a small red dog", "the night and the moon"):
        ask(server, [{"role": "user", "content": other}], max_tokens=6)  # slots taken over
    returning = [*first, answer["choices"][0]["message"], {"role": "user", "content": "and?"}]
    figures = ask(server, returning, max_tokens=6)["specrun"]
    assert figures["prompt_evaluated"] < figures["prompt_tokens"] // 3
