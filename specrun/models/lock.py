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
from typing import TypedDict

from specrun.errors import SpecrunError
from specrun.models.cache import hub_cache_dir
from specrun.system.files import replaced_atomically
from specrun.system.formatting import format_size


class LockRecord(TypedDict, total=False):
    """A file's record in the lock file (`check_integrity`). Written whole; read back as the
    file on disk has it, so each key may be missing."""

    sha256: str
    source: str  # where the expected digest came from: a pin, an earlier check, the Hub
    size: int
    mtime_ns: int


class IntegrityError(SpecrunError):
    """A model file whose sha256 is not the expected one: it is never loaded."""


def lock_path() -> Path:
    """The lock file, beside the Hugging Face cache (inside it, huggingface_hub's scan would
    take it for a broken repo)."""
    cache_dir = hub_cache_dir()
    return cache_dir.parent / f"{cache_dir.name}.specrun-lock.json"


def read_lock() -> dict[str, LockRecord]:
    try:
        files: dict[str, LockRecord] = json.loads(lock_path().read_text(encoding="utf-8"))["files"]
        return files
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(
            f"cannot read the lock file {lock_path()} ({exc}); move it away and run "
            "`specrun models verify` to record the cached models again"
        ) from None


def _write_lock(files: Mapping[str, LockRecord]) -> None:
    with replaced_atomically(lock_path()) as temporary:
        temporary.write_text(
            json.dumps(
                {
                    "about": "sha256 of each model file as specrun checked it: the pin in "
                    "models.toml, else the Hub's hash at the first download; converted/ are "
                    "the heads specrun converted to GGUF, hashed as made",
                    "files": dict(sorted(files.items())),
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
) -> LockRecord:
    """Refuse `path` unless its sha256 is the expected one; returns its lock record.

    Expected: the catalog's pin, else the lock file's record, else the Hub's LFS hash, which
    huggingface_hub names the blob by. A file whose size and mtime are those recorded at the last
    check is not hashed again (a 42 GB file takes minutes) unless `rehash`. A file with none of
    these is recorded as it is, with `origin` as the record's source (trust on first use)."""
    blob = path.resolve()
    stat = blob.stat()
    key = f"{repo}/{name}"
    lock = read_lock()
    recorded = lock.get(key, {})
    expected, source = _expected_sha256(pin, recorded, blob.name, origin)
    unchanged = (recorded.get("size"), recorded.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns)
    if not rehash and unchanged and recorded.get("sha256") == expected:
        return recorded
    if progress:
        print(
            f"Checking sha256 of {name} ({format_size(stat.st_size)})", file=sys.stderr, flush=True
        )
    actual = _sha256(blob)
    if expected is not None and actual != expected:
        where = f", as recorded in {lock_path()}" if not pin and recorded.get("sha256") else ""
        raise IntegrityError(
            f"{key} has sha256 {actual}, not {expected} ({source}{where}); it is not used: "
            f"remove it with `specrun models rm {label}` and pull it again"
        )
    lock[key] = {
        "sha256": actual,
        "source": source,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
    }
    _write_lock(lock)
    return lock[key]


def _expected_sha256(
    pin: str | None, recorded: LockRecord, blob_name: str, origin: str
) -> tuple[str | None, str]:
    """The digest the file must have, and where it came from (kept in the lock record)."""
    if pin:
        return pin.lower(), "the pin in models.toml"
    if recorded.get("sha256"):
        return recorded["sha256"], recorded.get("source", "an earlier check")
    if re.fullmatch(
        r"[0-9a-f]{64}", blob_name
    ):  # an LFS file: huggingface_hub names it by its ETag, the sha256
        return blob_name, "the Hub's LFS hash"
    return None, origin


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def forget(repo: str, names: Iterable[str]) -> None:
    """Drop the lock's records of removed files, so the next download is trusted afresh."""
    lock = read_lock()
    keys = [f"{repo}/{name}" for name in names if f"{repo}/{name}" in lock]
    if keys:
        _write_lock({key: value for key, value in lock.items() if key not in keys})
