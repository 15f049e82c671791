"""A suffix store kept on disk between runs (`--suffix-store FILE`): the earlier answers suffix
drafts draft from, with the tenant each belongs to, for the vocabulary they were made with.

Read back as the other state files are (`models.state`): only a regular file of bounded size,
checked against a declared schema, every token inside the vocabulary, and the vocabulary the
very one the target has now; anything else is one line naming the file and what is wrong,
before any generation. The file holds the answers' tokens, so it is as private as they are:
it is written for its owner alone (mode 0600), whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from specrun.core.suffix import SuffixStore
from specrun.errors import SpecrunError
from specrun.llama.vocab import Vocabulary
from specrun.models.state import read_state_text, validated
from specrun.system.files import replaced_atomically


class SavedAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    tenant: str | None  # whose answer (an API key's digest; None: no key)
    tokens: list[int]


class SavedStore(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    version: Literal[1]
    vocabulary: str  # `vocabulary_digest` of the model the answers were made with
    answers: list[SavedAnswer]  # the oldest first


def vocabulary_digest(model: Vocabulary) -> str:
    """What tells one vocabulary from another: every token's text, in order."""
    digest = hashlib.sha256(str(model.n_vocab).encode())
    for token in range(model.n_vocab):
        digest.update(model.token_text(token).encode() + b"\0")
    return digest.hexdigest()


def load_store(store: SuffixStore, model: Vocabulary, path: Path) -> int:
    """Add the answers kept in `path` to `store` (none where there is no such file yet); how
    many. SpecrunError where the file is not a store for this vocabulary."""
    text = read_state_text(path, "the suffix store", error=SpecrunError)
    if text is None:
        return 0
    try:
        data = json.loads(text)
    except ValueError as error:
        raise SpecrunError(f"the suffix store {path} is not JSON ({error})") from None
    saved = validated(SavedStore, data, f"the suffix store {path}", error=SpecrunError)
    if saved.vocabulary != vocabulary_digest(model):
        raise SpecrunError(
            f"the suffix store {path} was kept for another vocabulary than {model.name}'s: "
            "give another file for this model, or remove it"
        )
    for number, answer in enumerate(saved.answers):
        if any(not 0 <= token < model.n_vocab for token in answer.tokens):
            raise SpecrunError(
                f"the suffix store {path}: answers[{number}].tokens holds a token outside the "
                f"vocabulary (0-{model.n_vocab - 1})"
            )
    for answer in saved.answers:
        store.add(answer.tokens, answer.tenant)
    return len(saved.answers)


def save_store(store: SuffixStore, model: Vocabulary, path: Path) -> None:
    """Keep the store's answers in `path`, replacing what it held, readable by its owner only."""
    kept = [SavedAnswer(tenant=tenant, tokens=tokens) for tenant, tokens in store.kept()]
    record = SavedStore(version=1, vocabulary=vocabulary_digest(model), answers=kept)
    with replaced_atomically(path, mode=0o600) as partial:
        partial.write_text(record.model_dump_json(), encoding="utf-8")
