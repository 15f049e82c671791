"""Conversations saved to a file and resumed (`specrun chat --resume FILE`, the TUI's `/save`
and `/load`).

A conversation file is JSON, declared by `ConversationFile` (its JSON schema is
`ConversationFile.model_json_schema()`):

    {"format": "specrun.conversation", "version": 1, "system": "Be brief." | null,
     "messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...],
     "model": "the target's file name" | null, "dropped_exchanges": 0}

The messages alternate, a user's first, each user message followed by its answer. A file is
checked whole on load; what is wrong is one line that names the file and the field. The
model is what the conversation was held with, for the reader: any model may resume it (its
template renders the messages anew).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specrun.chat import Conversation
from specrun.errors import SpecrunError
from specrun.prompt import Message

FORMAT: Literal["specrun.conversation"] = "specrun.conversation"
VERSION: Literal[1] = 1


class SavedMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str


class ConversationFile(BaseModel):
    """A conversation file's content (version 1)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["specrun.conversation"]
    version: Literal[1]
    system: str | None = None
    messages: list[SavedMessage]
    model: str | None = None
    dropped_exchanges: int = Field(0, ge=0)  # dropped to fit the context before it was saved

    @model_validator(mode="after")
    def _alternating(self) -> ConversationFile:
        for index, message in enumerate(self.messages):
            expected = "user" if index % 2 == 0 else "assistant"
            if message.role != expected:
                raise ValueError(
                    f"messages[{index}].role is {message.role}: the messages alternate, "
                    "a user's first"
                )
        if len(self.messages) % 2:
            raise ValueError("the last message is a user's: each needs its answer")
        return self


class ConversationFileError(SpecrunError):
    """A conversation file that cannot be read or written, in one line."""


def save_conversation(conversation: Conversation, path: str | os.PathLike[str]) -> Path:
    """Write the conversation to `path` (whole or not at all: a new file renamed over it);
    where it ends with a question still unanswered, that question is left out. Returns the
    path written."""
    turns = conversation.turns[: len(conversation.turns) // 2 * 2]
    saved = ConversationFile(
        format=FORMAT,
        version=VERSION,
        system=conversation.system,
        messages=[SavedMessage(role=_role(m), content=m.content) for m in turns],
        model=conversation.model.name,
        dropped_exchanges=conversation.dropped_turns,
    )
    target = Path(path).expanduser()
    text = json.dumps(saved.model_dump(), indent=2, ensure_ascii=False) + "\n"
    written: str | None = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.", delete=False
        ) as file:
            written = file.name
            file.write(text)
        os.replace(written, target)
    except OSError as error:
        if written is not None:
            Path(written).unlink(missing_ok=True)
        raise ConversationFileError(
            f"cannot save the conversation to {target}: {_why(error)}"
        ) from None
    return target


def load_conversation(path: str | os.PathLike[str]) -> ConversationFile:
    """Read and check a conversation file; ConversationFileError says what is wrong."""
    source = Path(path).expanduser()
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConversationFileError(f"cannot read {source}: {_why(error)}") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConversationFileError(
            f"{source} is not JSON: {error.msg} at line {error.lineno}"
        ) from None
    if isinstance(body, dict) and isinstance(body.get("version"), int) and body["version"] > 1:
        raise ConversationFileError(
            f"{source} is a conversation file of version {body['version']}; "
            f"this specrun reads version {VERSION}"
        )
    try:
        return ConversationFile.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ConversationFileError(
            f"{source} is not a conversation file: {where + ': ' if where else ''}{message}"
        ) from None


def resume(conversation: Conversation, saved: ConversationFile) -> None:
    """Make `conversation` the saved one: its system prompt (where the file has one) and its
    messages, in place of what it held."""
    if saved.system is not None:
        conversation.system = saved.system
    conversation.turns = [Message(m.role, m.content) for m in saved.messages]
    conversation.dropped_turns = saved.dropped_exchanges


def _role(message: Message) -> Literal["user", "assistant"]:
    assert message.role in ("user", "assistant"), "a chat's turns are users' and answers"
    return "user" if message.role == "user" else "assistant"


def _why(error: OSError | UnicodeDecodeError) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "it is not UTF-8 text"
    return error.strerror or str(error)
