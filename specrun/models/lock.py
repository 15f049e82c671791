"""The integrity lock: each model file's sha256 as specrun checked it, in a JSON file beside
the Hugging Face cache. A file is used only when its hash is the catalog's pin, else the one
recorded at its first download (trust on first use), else the Hub's LFS hash."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specrun.errors import SpecrunError
from specrun.models.cache import MAIN, InvalidName, check_file_name, check_hub_names, hub_cache_dir
from specrun.models.state import read_state_text, validated
from specrun.system.files import replaced_atomically
from specrun.system.formatting import format_size

_SHA256 = re.compile(r"[0-9a-f]{64}")
CONVERTED = "converted"  # lock keys `converted/<path under converted/>`: no Hub repo id is one part


class LockRecord(BaseModel):
    """A file's record in the lock file (`check_integrity`), as written and as read back."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")

    sha256: str
    source: str  # where the expected digest came from: a pin, an earlier check, the Hub
    size: Annotated[int, Field(ge=0)]
    mtime_ns: int

    @field_validator("sha256")
    @classmethod
    def _a_digest(cls, sha256: str) -> str:
        if not _SHA256.fullmatch(sha256):
            raise ValueError("should be a sha256: 64 hex digits in lower case")
        return sha256


class LockFile(BaseModel):
    """The lock file: each file's record by its key (`lock_key`)."""

    model_config = ConfigDict(strict=True)

    about: str = ""
    files: dict[str, LockRecord]

    @field_validator("files")
    @classmethod
    def _keys_name_files(cls, files: dict[str, LockRecord]) -> dict[str, LockRecord]:
        for key in files:
            try:
                parse_lock_key(key)
            except InvalidName as error:
                raise ValueError(f"key '{key}': {error}") from None
        return files


class LockKey(NamedTuple):
    """What a lock key names: a file of a Hub repo at a revision, or (repo CONVERTED) a GGUF
    under specrun's converted/ folder."""

    repo: str
    name: str
    revision: str = MAIN


def lock_key(repo: str, name: str, revision: str = MAIN) -> str:
    """`ORG/NAME/FILE` (the branch main), `ORG/NAME@REVISION/FILE`, or `converted/PATH`."""
    return f"{repo}{'' if revision == MAIN else '@' + revision}/{name}"


def parse_lock_key(key: str) -> LockKey:
    """The repo, file and revision a key names, each checked as a name that becomes a path."""
    first, _, rest = key.partition("/")
    if first == CONVERTED:
        check_file_name(rest)
        return LockKey(CONVERTED, rest)
    second, _, name = rest.partition("/")
    repo, _, revision = f"{first}/{second}".partition("@")
    check_hub_names(repo, name, revision or MAIN)
    return LockKey(repo, name, revision or MAIN)


class IntegrityError(SpecrunError):
    """A model file whose sha256 is not the expected one, or a lock file that cannot be read:
    the file is never loaded."""


def lock_path() -> Path:
    """The lock file, beside the Hugging Face cache (inside it, huggingface_hub's scan would
    take it for a broken repo)."""
    cache_dir = hub_cache_dir()
    return cache_dir.parent / f"{cache_dir.name}.specrun-lock.json"


_MOVE_IT_AWAY = "move it away and run `specrun models verify` to record the cached models again"


def read_lock() -> dict[str, LockRecord]:
    """The lock's records by key; empty where there is no lock file yet."""
    path = lock_path()
    text = read_state_text(path, "the lock file", error=IntegrityError)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        raise IntegrityError(
            f"the lock file {path} is not JSON ({reason}); {_MOVE_IT_AWAY}"
        ) from None
    where = f"the lock file {path}"
    try:
        return validated(LockFile, data, where, error=IntegrityError).files
    except IntegrityError as error:
        raise IntegrityError(f"{error}; {_MOVE_IT_AWAY}") from None


def _write_lock(files: Mapping[str, LockRecord]) -> None:
    with replaced_atomically(lock_path()) as temporary:
        temporary.write_text(
            json.dumps(
                {
                    "about": "sha256 of each model file as specrun checked it: the pin in "
                    "models.toml, else the Hub's hash at the first download; converted/ are "
                    "the heads specrun converted to GGUF, hashed as made",
                    "files": {key: files[key].model_dump() for key in sorted(files)},
                },
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )


def check_integrity(
    repo: str,
    name: str,
    path: Path,
    label: str,
    *,
    pin: str | None,
    progress: bool,
    rehash: bool,
    origin: str = "first download",
    revision: str = MAIN,
) -> LockRecord:
    """Refuse `path` unless its sha256 is the expected one; returns its lock record.

    Expected: the catalog's pin, else the lock file's record, else the Hub's LFS hash, which
    huggingface_hub names the blob by. A file whose size and mtime are those recorded at the last
    check is not hashed again (a 42 GB file takes minutes) unless `rehash`. A file with none of
    these is recorded as it is, with `origin` as the record's source (trust on first use)."""
    blob = path.resolve()
    stat = blob.stat()
    key = lock_key(repo, name, revision)
    lock = read_lock()
    recorded = lock.get(key)
    expected, source = _expected_sha256(pin, recorded, blob.name, origin)
    unchanged = recorded is not None and (recorded.size, recorded.mtime_ns) == (
        stat.st_size,
        stat.st_mtime_ns,
    )
    if recorded is not None and not rehash and unchanged and recorded.sha256 == expected:
        return recorded
    if progress:
        print(
            f"Checking sha256 of {name} ({format_size(stat.st_size)})", file=sys.stderr, flush=True
        )
    actual = _sha256(blob)
    if expected is not None and actual != expected:
        where = f", as recorded in {lock_path()}" if not pin and recorded is not None else ""
        raise IntegrityError(
            f"{key} has sha256 {actual}, not {expected} ({source}{where}); it is not used: "
            f"remove it with `specrun models rm {label}` and pull it again"
        )
    lock[key] = LockRecord(
        sha256=actual, source=source, size=stat.st_size, mtime_ns=stat.st_mtime_ns
    )
    _write_lock(lock)
    return lock[key]


def _expected_sha256(
    pin: str | None, recorded: LockRecord | None, blob_name: str, origin: str
) -> tuple[str | None, str]:
    """The digest the file must have, and where it came from (kept in the lock record)."""
    if pin:
        return pin.lower(), "the pin in models.toml"
    if recorded is not None:
        return recorded.sha256, recorded.source
    if _SHA256.fullmatch(blob_name):  # an LFS file: huggingface_hub names it by its ETag
        return blob_name, "the Hub's LFS hash"
    return None, origin


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def forget(repo: str, names: Iterable[str]) -> None:
    """Drop the lock's records of removed files, at every revision, so the next download is
    trusted afresh."""
    lock = read_lock()
    removed = set(names)
    kept = {
        key: record
        for key, record in lock.items()
        if not ((named := parse_lock_key(key)).repo == repo and named.name in removed)
    }
    if len(kept) != len(lock):
        _write_lock(kept)
