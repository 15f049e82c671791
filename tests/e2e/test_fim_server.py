"""Fill-in-the-middle through `specrun serve`: `suffix` in /v1/completions (what Continue's
autocomplete sends, through the `openai` SDK) and llama-server's /infill, on a tiny model with
Qwen2.5-Coder's FIM tokens; greedy, the answer with a draft is plain decoding's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.support.processes import DEADLINE
from tests.support.server import Server
from tests.support.tinymodels import FIM_TOKENS, write_tiny_model

PREFIX = "def the_cat():\n    the sea"
SUFFIX = "\n    return the dog\n"
TOKENS = 40
INFILL = {"input_prefix": "a", "input_suffix": "b"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fim-server")
    return {
        "coder": write_tiny_model(folder / "coder.gguf", specials=FIM_TOKENS),
        "draft": write_tiny_model(folder / "draft.gguf", specials=FIM_TOKENS, noise=0.1),
        "chat": write_tiny_model(folder / "chat.gguf"),  # no FIM tokens
    }


@pytest.fixture(scope="module")
def server(models: dict[str, Path]):
    running = Server(
        "-t", str(models["coder"]), "-d", str(models["draft"]), "--gamma", "3",
        "--model", str(models["chat"]), "--parallel", "1",
    )  # fmt: skip
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def plain(models: dict[str, Path]) -> dict[str, object]:
    """Plain decoding's answers (no draft), for the drafting server to match."""
    running = Server("-t", str(models["coder"]), "--parallel", "1")
    try:
        return {
            "infill": infill(running, PREFIX, SUFFIX),
            "continuation": running.client()
            .completions.create(prompt=PREFIX, max_tokens=TOKENS, temperature=0, model="coder")
            .choices[0]
            .text,
        }
    finally:
        assert running.stop() == 0


def infill(server: Server, prefix: str, suffix: str, **fields: object) -> dict:
    body = {"input_prefix": prefix, "input_suffix": suffix, "n_predict": TOKENS, "temperature": 0}
    answer = httpx.post(f"{server.url}/infill", json={**body, **fields}, timeout=DEADLINE)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_an_infill_with_a_draft_is_plain_decodings(server: Server, plain: dict) -> None:
    answer = infill(server, PREFIX, SUFFIX)
    assert answer["content"] == plain["infill"]["content"]  # type: ignore[index]
    figures = ("tokens_predicted", "tokens_evaluated", "stop_type")
    assert [answer[f] for f in figures] == [plain["infill"][f] for f in figures]  # type: ignore[index]
    assert answer["specrun"]["drafted"] > 0  # it drafted, and what it kept is the target's


def test_a_completion_with_a_suffix_is_the_same_infill(server: Server, plain: dict) -> None:
    completion = server.client().completions.create(
        model="coder", prompt=PREFIX, suffix=SUFFIX, max_tokens=TOKENS, temperature=0
    )
    assert completion.choices[0].text == plain["infill"]["content"]  # type: ignore[index]
    assert completion.usage.prompt_tokens == plain["infill"]["tokens_evaluated"]  # type: ignore[index]
    # An empty suffix asks for nothing after the answer: a plain continuation.
    continued = server.client().completions.create(
        model="coder", prompt=PREFIX, suffix="", max_tokens=TOKENS, temperature=0
    )
    assert continued.choices[0].text == plain["continuation"]


def test_a_streamed_infill_comes_in_pieces_ending_as_llama_server_ends(
    server: Server, plain: dict
) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": TOKENS}
    with httpx.stream(
        "POST", f"{server.url}/infill", json={**body, "temperature": 0, "stream": True},
        timeout=DEADLINE,
    ) as streamed:  # fmt: skip
        lines = [line for line in streamed.iter_lines() if line]
    assert all(line.startswith("data: {") for line in lines)  # no [DONE]: not OpenAI's
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    *pieces, last = events
    assert not any(piece["stop"] for piece in pieces) and last["stop"] is True
    assert "".join(piece["content"] for piece in pieces) == plain["infill"]["content"]  # type: ignore[index]
    assert last["content"] == "" and last["tokens_predicted"] == plain["infill"]["tokens_predicted"]  # type: ignore[index]


def test_a_stop_string_ends_the_middle_and_is_named(server: Server, plain: dict) -> None:
    whole = plain["infill"]["content"]  # type: ignore[index]
    stop = re.search("[a-z]{3}", whole).group()  # type: ignore[union-attr]
    answer = infill(server, PREFIX, SUFFIX, stop=[stop])
    assert answer["content"] == whole[: whole.index(stop)]
    assert (answer["stop_type"], answer["stopping_word"]) == ("word", stop)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"model": "chat", "prompt": "a", "suffix": "b"}, "suffix"),
        ("/infill", {"model": "chat", "input_prefix": "a", "input_suffix": "b"}, "input_suffix"),
        ("/infill", {"input_prefix": "a"}, "input_suffix"),
        ("/infill", {**INFILL, "n_predict": -2}, "n_predict"),
        ("/infill", {**INFILL, "n": 2}, "n"),
        ("/infill", {**INFILL, "input_extra": [{}]}, "input_extra[0].text"),
    ],
)  # fmt: skip
def test_what_cannot_be_filled_in_is_a_400_naming_the_field(
    server: Server, path: str, body: dict, param: str
) -> None:
    answer = httpx.post(f"{server.url}{path}", json=body, timeout=DEADLINE)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_a_model_without_fim_tokens_says_so(server: Server) -> None:
    answer = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": "chat", "prompt": "a", "suffix": "b", "max_tokens": 4},
        timeout=DEADLINE,
    )
    assert "chat.gguf cannot fill in the middle" in answer.json()["error"]["message"]
    # and it still continues text: an empty suffix is no infill
    plain = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": "chat", "prompt": "a", "suffix": "", "max_tokens": 4},
        timeout=DEADLINE,
    )
    assert plain.status_code == 200, plain.text
