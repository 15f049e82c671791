"""/v1/embeddings: OpenAI's embeddings over the server's embedding models (`--embedding-model`,
the pool's `embedding`), and `embed`, the one way a route of any family turns inputs into
vectors. The inputs of a request are decoded together (`Embedder.embed`) in a thread of their
own, never a generation's, so that embedding waits for no generation and stalls none; one
model's requests take turns on its context."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specrun.errors import SpecrunError
from specrun.llama.embedding import CannotEmbed, Embedder
from specrun.server.bodies import EmbeddingRequest
from specrun.server.pool import ModelPool
from specrun.server.requests import ApiError, checked, echoed, served_model

PATH = "/v1/embeddings"
MAX_INPUTS = 2048  # in one request, as OpenAI's API takes
Input = str | Sequence[int]  # text, or token ids as they are


@dataclass(frozen=True)
class Embedded:
    """A request's vectors (rows at unit length, in the order of its inputs), the model's id,
    and the tokens they took."""

    model: str
    vectors: np.ndarray
    prompt_tokens: int


async def answer(pool: ModelPool, body: dict[str, object]) -> dict[str, object]:
    """A /v1/embeddings body's answer, in OpenAI's shape."""
    asked = checked(EmbeddingRequest, body)
    inputs, listed = _inputs(asked.input)
    embedded = await embed(pool, asked.model, inputs, asked.dimensions, listed=listed)

    def written(vector: np.ndarray) -> list[float] | str:
        if asked.encoding_format == "base64":  # what OpenAI's SDKs ask for, and decode
            return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
        return [float(value) for value in vector]

    tokens = embedded.prompt_tokens
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": written(vector)}
            for index, vector in enumerate(embedded.vectors)
        ],
        "model": embedded.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _inputs(given: str | list[str] | list[int] | list[list[int]]) -> tuple[list[Input], bool]:
    """The inputs a body's `input` holds, and whether it lists them (a list of strings or of
    token lists) rather than being one (a string, or one list of token ids)."""
    if isinstance(given, str):
        return [given], False
    ids = [item for item in given if isinstance(item, int)]
    if len(ids) == len(given):  # an empty list too: one input, empty
        return [ids], False
    return [item for item in given if not isinstance(item, int)], True  # all of them: declared


async def embed(
    pool: ModelPool,
    model: str | None,
    inputs: Sequence[Input],
    dimensions: int | None = None,
    *,
    listed: bool = True,
) -> Embedded:
    """`inputs`' vectors by the embedding model `model` names (None: the first), loaded now if
    it is not. Each input is text (tokenized with the model's special tokens, as llama-server
    does) or token ids; an ApiError names OpenAI's field at fault: `model`, `dimensions`,
    `input`, or where `listed`, `input[i]`."""
    model_id = embedding_model(pool, model)
    if not inputs:
        raise ApiError(400, "`input` is an empty list", param="input", code="invalid_value")
    if len(inputs) > MAX_INPUTS:
        raise ApiError(
            400,
            f"`input` has {len(inputs)} items; at most {MAX_INPUTS} go in one request",
            param="input",
            code="invalid_value",
        )
    return await asyncio.to_thread(_embed, pool, model_id, inputs, dimensions, listed)


def embedding_model(pool: ModelPool, named: str | None) -> str:
    """The id of the embedding model a request names, the first where it names none; a 400
    naming `model` where the model generates, or the server has no embedding model."""
    if pool.embedding and named is None:
        return next(iter(pool.embedding))
    model_id = served_model(named, pool.names)
    if model_id not in pool.embedding:
        raise ApiError(
            400,
            f"the model `{echoed(model_id)}` generates text and makes no embeddings; "
            + (
                f"this server embeds with {', '.join(f'`{m}`' for m in pool.embedding)}"
                if pool.embedding
                else "start the server with --embedding-model FILE to serve an embedding model"
            ),
            param="model",
            code="invalid_value",
        )
    return model_id


def check_generates(pool: ModelPool, model_id: str) -> None:
    """The 400, naming `model`, of a generation request that names an embedding model."""
    if model_id in pool.embedding:
        raise ApiError(
            400,
            f"the model `{model_id}` is an embedding model: it answers /v1/embeddings only",
            param="model",
            code="invalid_value",
        )


def _embed(
    pool: ModelPool,
    model_id: str,
    inputs: Sequence[Input],
    dimensions: int | None,
    listed: bool,
) -> Embedded:
    """In a thread: the model acquired (loaded where it is not), the inputs checked against it
    and embedded, the model released."""
    try:
        embedder = pool.acquire_embedder(model_id)
    except CannotEmbed as error:  # its file changed since the server checked it
        raise ApiError(400, str(error), param="model", code="invalid_value") from None
    except SpecrunError as error:
        raise ApiError(
            503,
            f"the model `{model_id}` could not be loaded: {error}",
            kind="server_error",
            code="model_not_loaded",
        ) from None
    try:
        if dimensions is not None and dimensions != embedder.n_embd:
            raise ApiError(
                400,
                f"`dimensions` is {dimensions}, but `{model_id}`'s vectors have "
                f"{embedder.n_embd}: leave it out, or send {embedder.n_embd}",
                param="dimensions",
                code="invalid_value",
            )
        tokens = [
            _tokens(embedder, one, f"input[{index}]" if listed else "input")
            for index, one in enumerate(inputs)
        ]
        vectors = embedder.embed(tokens)
    finally:
        pool.release(model_id)
    return Embedded(model_id, vectors, sum(map(len, tokens)))


def _tokens(embedder: Embedder, given: Input, field: str) -> list[int]:
    """One input's tokens, or the 400 naming its field: empty, too long for the model's
    context, or a token id outside its vocabulary."""
    if isinstance(given, str):  # "" is empty, as OpenAI's API has it, whatever BOS it gets
        tokens = embedder.tokenize(given, add_special=True, parse_special=True) if given else []
    else:
        tokens = list(given)
        outside = next((t for t in tokens if not 0 <= t < embedder.n_vocab), None)
        if outside is not None:
            raise ApiError(
                400,
                f"`{field}` holds the token id {outside}, outside the vocabulary of "
                f"{embedder.n_vocab} tokens",
                param=field,
                code="invalid_value",
            )
    if not tokens:
        raise ApiError(400, f"`{field}` is empty", param=field, code="invalid_value")
    if len(tokens) > embedder.n_ctx:
        raise ApiError(
            400,
            f"`{field}` is {len(tokens)} tokens, but the embedding model's context is "
            f"{embedder.n_ctx}: send a shorter text",
            param=field,
            code="context_length_exceeded",
        )
    return tokens
