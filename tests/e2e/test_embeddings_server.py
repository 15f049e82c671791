"""/v1/embeddings through `specrun serve`, spoken to with the `openai` SDK and httpx: each
vector checked against the model's hidden states pooled by hand (llama-cpp-python's own
`Llama`, with llama.cpp's pooling off, so a vector per token), and each refusal a 400 that
names its field."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import llama_cpp
import numpy as np
import pytest

from tests.support.cli import specrun
from tests.support.processes import DEADLINE
from tests.support.server import Server
from tests.support.tinymodels import write_tiny_model

# The tiny llama written with each pooling llama.cpp has (its `llama.pooling_type`).
POOLINGS = {"mean": 1, "cls": 2, "last": 3}
TEXTS = ["the cat is blue", "hello world", "a big red dog and the small sun in the sea"]


@pytest.fixture(scope="module")
def embedders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("embedding")
    return {
        name: write_tiny_model(folder / f"{name}.gguf", pooling=code, seed=7)
        for name, code in POOLINGS.items()
    }


@pytest.fixture(scope="module")
def server(tiny_target: Path, embedders: dict[str, Path]):
    options = [option for path in embedders.values() for option in ("--embedding-model", path)]
    running = Server("-t", str(tiny_target), "--parallel", "1", *map(str, options))
    yield running
    assert running.stop() == 0


def by_hand(path: Path, pooling: str, text: str) -> tuple[np.ndarray, int]:
    """The model's last hidden states, one per token (llama.cpp's pooling none), pooled
    here as `pooling` says and scaled to unit length; and how many tokens."""
    model = llama_cpp.Llama(
        str(path), embedding=True, pooling_type=0, n_threads=1, n_ctx=256, verbose=False
    )
    try:
        states = np.array(model.embed(text, normalize=False))
    finally:
        model.close()
    pooled = {"mean": states.mean(axis=0), "cls": states[0], "last": states[-1]}[pooling]
    return pooled / np.linalg.norm(pooled), len(states)


def post(server: Server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/embeddings", json=body, timeout=DEADLINE)


@pytest.mark.parametrize("pooling", list(POOLINGS))
def test_each_vector_is_the_hidden_states_pooled_as_the_model_declares(
    server: Server, embedders: dict[str, Path], pooling: str
) -> None:
    # The SDK asks for base64 and decodes it; the inputs are decoded together, in one batch.
    answer = server.client().embeddings.create(model=pooling, input=TEXTS)
    expected = [by_hand(embedders[pooling], pooling, text) for text in TEXTS]
    assert [item.index for item in answer.data] == [0, 1, 2]
    for item, (vector, _) in zip(answer.data, expected):
        assert np.abs(np.array(item.embedding) - vector).max() < 1e-4
    tokens = sum(count for _, count in expected)
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (tokens, tokens)
    assert answer.model == pooling


def test_floats_base64_and_token_ids_give_one_vector(
    server: Server, embedders: dict[str, Path]
) -> None:
    text = TEXTS[2]
    floats = post(server, {"model": "mean", "input": text, "encoding_format": "float"}).json()
    encoded = post(server, {"model": "mean", "input": [text], "encoding_format": "base64"})
    vector = np.array(floats["data"][0]["embedding"], dtype=np.float32)
    decoded = np.frombuffer(base64.b64decode(encoded.json()["data"][0]["embedding"]), "<f4")
    assert np.array_equal(vector, decoded)
    assert abs(np.linalg.norm(vector) - 1) < 1e-5  # unit length, as OpenAI's
    # The text's tokens as llama-server tokenizes an input: BOS, special tokens read as such.
    vocabulary = llama_cpp.Llama(str(embedders["mean"]), vocab_only=True, verbose=False)
    ids = vocabulary.tokenize(text.encode(), add_bos=True, special=True)
    by_ids = post(server, {"model": "mean", "input": ids}).json()
    listed = post(server, {"model": "mean", "input": [ids, ids[:3]]}).json()
    assert by_ids["data"][0]["embedding"] == floats["data"][0]["embedding"]
    assert np.abs(np.array(listed["data"][0]["embedding"]) - vector).max() < 1e-5
    assert by_ids["usage"]["prompt_tokens"] == len(ids) == floats["usage"]["prompt_tokens"]


def test_the_embedding_models_are_listed_and_the_first_is_the_default(server: Server) -> None:
    listed = [model.id for model in server.client().models.list().data]
    assert listed[0] == server.model and set(listed[1:]) == set(POOLINGS)
    assert post(server, {"input": "the sea"}).json()["model"] == "mean"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["the sea", ""]}, "input[1]"),
        ({"input": [[5, 6], []]}, "input[1]"),
        ({"input": [5, 10**9]}, "input"),
        ({"input": [[5], [-1]]}, "input[1]"),
        ({"input": " ".join(["sea"] * 2000)}, "input"),
        ({"input": [True]}, "input"),
        ({"input": "the sea", "dimensions": 32}, "dimensions"),
        ({"input": "the sea", "encoding_format": "hex"}, "encoding_format"),
        ({"model": "target", "input": "the sea"}, "model"),  # a generation model
    ],
)
def test_what_cannot_be_embedded_is_a_400_naming_the_field(
    server: Server, body: dict, param: str
) -> None:
    answer = post(server, {"model": "mean", **body})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["type"]) == (param, "invalid_request_error"), error


def test_an_unknown_model_is_a_404_and_an_embedding_model_generates_nothing(
    server: Server,
) -> None:
    assert post(server, {"model": "nope", "input": "x"}).status_code == 404
    answer = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "last", "messages": [{"role": "user", "content": "hi"}]},
        timeout=DEADLINE,
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "model"
    assert "embedding model" in answer.json()["error"]["message"]


def test_without_an_embedding_model_the_400_says_how_to_serve_one(tiny_target: Path) -> None:
    running = Server("-t", str(tiny_target), "--parallel", "1")
    try:
        answer = post(running, {"input": "the sea"})
    finally:
        assert running.stop() == 0
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "model"
    assert "--embedding-model" in answer.json()["error"]["message"]


@pytest.mark.parametrize(("pooling", "words"), [(None, "declares no pooling"), (4, "reranker")])
def test_a_model_that_pools_no_vector_is_refused_before_anything_loads(
    tmp_path: Path, tiny_target: Path, pooling: int | None, words: str
) -> None:
    model = write_tiny_model(tmp_path / "causal.gguf", pooling=pooling)
    result = specrun(
        "serve", "-t", str(tiny_target), "--port", "0", "--parallel", "1",
        "--embedding-model", str(model),
    )  # fmt: skip
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1 and result.stdout == "", result.stderr
    assert lines[0].startswith(f"specrun: error: --embedding-model {model}: causal.gguf")
    assert words in lines[0]
