"""Files specrun reads back from disk (the integrity lock, a models.toml): read only when they
are regular files of a bounded size, and checked against a declared schema, so that a file
damaged or edited by hand is one line naming the file and the field, never a traceback.

A FIFO or a device would block the read or never end it (`/dev/zero`), so neither is read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from specrun.errors import SpecrunError
from specrun.system.files import MISSING, REGULAR_FILE, what_is
from specrun.system.textio import read_text

MAX_STATE_BYTES = 64 << 20  # far above any lock or catalog: 300,000 records of the lock

Schema = TypeVar("Schema", bound=BaseModel)


def read_state_text(path: Path, what: str, *, error: type[SpecrunError]) -> str | None:
    """The UTF-8 text of `path`, None where there is no such file; `error` (naming `what` and
    the path) where it is not a regular file, is too large or cannot be read."""
    kind = what_is(path)
    if kind == MISSING:
        return None
    if kind != REGULAR_FILE:
        raise error(f"{what} {path} is {kind}, not a regular file")
    return read_text(path, what, error=error, limit=MAX_STATE_BYTES)


def validated(schema: type[Schema], data: Any, where: str, *, error: type[SpecrunError]) -> Schema:
    """`data` as `schema` declares it, or `error`: `where`, the first field at fault and why."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(first["loc"])
        reason = {"dict_type": _OBJECT, "model_type": _OBJECT, "missing": "is missing"}.get(
            first["type"], first["msg"]
        )
        raise error(f"{where}: {field + ' ' if field else ''}{_reason(reason)}") from None


_OBJECT = "should be an object"  # pydantic names its model's class, which the file never shows


def field_path(location: Sequence[int | str]) -> str:
    """pydantic's location of a field as one would write it: files["org/name/x.gguf"].size."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif path and not part.isidentifier():
            path += f'["{part}"]'
        else:
            path += f".{part}" if path else part
    return f"`{path}`" if path else ""


def _reason(message: str) -> str:
    """pydantic's message, lower case as the rest of the line ("Input should be ..." reads
    "should be ...")."""
    return message.removeprefix("Input ").removeprefix("Value error, ")
