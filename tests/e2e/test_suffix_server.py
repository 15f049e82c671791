"""Suffix drafts through `specrun serve`: each API key a tenant of its own, so that one key's
answers never become another's drafts, while a key's own earlier answers do."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.processes import DEADLINE
from tests.support.server import Server

PROMPT = "the cat and the dog in the sea"
TOKENS = 48


def ask(server: Server, prompt: str, key: str | None = None) -> tuple[str, dict]:
    """The raw prompt's greedy answer and its figures (the response's `specrun` object)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"prompt": prompt, "max_tokens": TOKENS, "temperature": 0}
    response = httpx.post(
        f"{server.url}/v1/completions", headers=headers, json=body, timeout=DEADLINE
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    return answer["choices"][0]["text"], answer["specrun"]


def test_one_keys_answers_never_reach_another_keys_drafts(tiny_target: Path) -> None:
    plain = Server("-t", str(tiny_target), "--gamma", "0")
    try:
        expected, _ = ask(plain, PROMPT)
    finally:
        plain.stop()
    # A fixed γ: each round's drafts depend on the text and the store alone, not on costs.
    options = ("-t", str(tiny_target), "--draft", "suffix", "--gamma", "4", "--parallel", "1")
    server = Server(*options, "--api-key", "alpha", "--api-key", "beta")
    try:
        alpha_first = ask(server, PROMPT, "alpha")
        beta_first = ask(server, PROMPT, "beta")
        alpha_second = ask(server, PROMPT, "alpha")
    finally:
        server.stop()
    for text, _ in (alpha_first, beta_first, alpha_second):
        assert text == expected  # greedy: what plain decoding answers
    drafting = ("drafted", "accepted", "rounds")
    # beta's first answer drafts as alpha's first did, from its own prompt and answer alone:
    # alpha's answer, the same text, is not among its drafts' sources.
    assert [beta_first[1][f] for f in drafting] == [alpha_first[1][f] for f in drafting]
    # alpha's second drafts from its first answer too: more accepted, in fewer rounds.
    assert alpha_second[1]["accepted"] > alpha_first[1]["accepted"]
    assert alpha_second[1]["rounds"] < alpha_first[1]["rounds"]


def test_without_keys_every_request_shares_one_tenant(tiny_target: Path) -> None:
    """The contrast: a server with no keys has one tenant, whose answers all requests share."""
    options = ("-t", str(tiny_target), "--draft", "suffix", "--gamma", "4", "--parallel", "1")
    server = Server(*options)
    try:
        first = ask(server, PROMPT)
        second = ask(server, PROMPT)
    finally:
        server.stop()
    assert first[0] == second[0]
    assert second[1]["accepted"] > first[1]["accepted"]


def test_the_environments_key_is_one_key_whatever_it_holds(tiny_target: Path) -> None:
    """--api-key repeats; $SPECRUN_API_KEY stays one key, never split at its spaces."""
    server = Server("-t", str(tiny_target), env={"SPECRUN_API_KEY": "two words"})
    try:
        url = f"{server.url}/v1/models"
        for key, status in (("two words", 200), ("two", 401), ("words", 401)):
            headers = {"Authorization": f"Bearer {key}"}
            assert httpx.get(url, headers=headers, timeout=DEADLINE).status_code == status
    finally:
        server.stop()
