"""Files specrun writes, and words for paths that are not the file they should be.

Outputs are checked before the work that fills them (a benchmark that ran for an hour
must not die on a typo in --json), and written whole under a temporary name unique to
the writer, then moved into place in one step: readers never see half a file, and two
processes making the same file (two first runs preparing the demo pair) do not collide.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specrun.errors import OptionError, SpecrunError

REGULAR_FILE = "a regular file"
MISSING = "missing"
_KINDS = [
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISREG, REGULAR_FILE),
]


def what_is(path: Path) -> str:
    """A few words for what `path` is: REGULAR_FILE, MISSING, 'a directory', 'a FIFO
    (named pipe)', 'a link to a missing file', 'a loop of symbolic links', ..."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a link to a missing file" if path.is_symlink() else MISSING
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return f"unreadable ({error.strerror})"
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def check_output_file(path: Path, option: str) -> Path:
    """Make sure, before any work, that `option`'s file can be written; returns the file
    to replace (through symbolic links, so a link keeps pointing at the new file)."""
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop, before Python 3.13
        raise OptionError(f"{option} {path} is a loop of symbolic links") from None
    kind = what_is(target)
    if kind not in (REGULAR_FILE, MISSING):
        raise OptionError(f"{option} {path} is {kind}; name a file to write")
    if what_is(target.parent) != "a directory":
        raise OptionError(f"{option} {path}: the folder {target.parent} does not exist")
    try:
        with tempfile.NamedTemporaryFile(
            dir=target.parent, prefix=f".{target.name}.", suffix=".partial"
        ):
            pass
    except OSError as error:
        raise OptionError(
            f"{option} {path}: cannot write in {target.parent} ({error.strerror})"
        ) from None
    return target


@contextmanager
def replaced_atomically(destination: Path, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside `destination`, unique to this call, to write the whole
    file to; when the block succeeds it replaces `destination`, else it is removed.
    It keeps `destination`'s extension, for writers that infer the format from it. The
    file gets `mode`'s permissions, or by default those the umask gives a new file."""
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(
            dir=destination.parent,
            prefix=f".{destination.name}.",
            suffix=f".partial{destination.suffix}",
        )
    except OSError as error:
        raise SpecrunError(
            f"cannot write {destination}: {_blocked(destination.parent, error)}"
        ) from None
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        # mkstemp's 0600 is for the temporary only, unless `mode` keeps the file as private.
        os.chmod(temporary, 0o666 & ~_umask() if mode is None else mode)
        os.replace(temporary, destination)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise SpecrunError(f"cannot write {destination}: {error.strerror or error}") from None
        raise


@contextmanager
def held_exclusively(lock: Path, what: str) -> Iterator[None]:
    """Hold the OS's exclusive lock on the file `lock` (made, with its folder, if missing) for
    the block, or fail at once naming `what` and the holder's process id. The OS releases
    the lock when its holder ends, however it ends, so a killed process blocks no one. The
    file holds the holder's id and is removed on release; a process that opened it just
    before finds that out once locked (the path no longer names its file) and tries again."""
    for _ in range(_LOCK_TRIES):
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            continue  # the folder went away with its last holder's file
        except OSError as error:
            raise SpecrunError(f"cannot lock {lock}: {_blocked(lock.parent, error)}") from None
        try:
            locked = _lock(descriptor)
        except OSError as error:
            os.close(descriptor)
            raise SpecrunError(f"cannot lock {lock}: {error.strerror or error}") from None
        if not locked:
            holder = _holder(descriptor)
            os.close(descriptor)
            raise SpecrunError(f"{what} is in use by another process{holder}")
        if _names(lock, descriptor):
            break
        _unlock(descriptor)
        os.close(descriptor)
    else:
        raise SpecrunError(f"cannot lock {lock}: other processes keep replacing it")
    try:
        os.ftruncate(descriptor, 0)
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        yield
    finally:
        try:
            lock.unlink()  # before unlocking: whoever locks it next sees it gone
        except OSError:
            pass  # Windows keeps an open file: the next holder takes it over
        _unlock(descriptor)
        os.close(descriptor)


_LOCK_TRIES = 8
_WINDOWS_LOCKED_BYTE = 4096  # past the process id, which the others read while it is held


if sys.platform == "win32":
    import msvcrt

    def _lock(descriptor: int) -> bool:
        """Lock without waiting: False if another process holds the lock."""
        os.lseek(descriptor, _WINDOWS_LOCKED_BYTE, os.SEEK_SET)
        try:
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
        except PermissionError:  # EACCES: locked by another process
            return False
        return True

    def _unlock(descriptor: int) -> None:
        os.lseek(descriptor, _WINDOWS_LOCKED_BYTE, os.SEEK_SET)
        msvcrt.locking(descriptor, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock(descriptor: int) -> bool:
        """Lock without waiting: False if another process holds the lock."""
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(descriptor: int) -> None:
        fcntl.flock(descriptor, fcntl.LOCK_UN)


def _names(path: Path, descriptor: int) -> bool:
    """Whether `path` still names the open file `descriptor`."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(descriptor))
    except OSError:
        return False


def _holder(descriptor: int) -> str:
    """' (pid N)' from a lock file's text, or '' before its holder wrote it."""
    try:
        os.lseek(descriptor, 0, os.SEEK_SET)
        text = os.read(descriptor, 32).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isascii() and text.isdigit() else ""


def _blocked(folder: Path, error: OSError) -> str:
    """Why `folder` could not be made or written in: a file where a folder should be (a cache
    variable naming a file, say) by its name, else the system's words."""
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    kind = what_is(existing)
    if kind != "a directory":
        return f"{existing} is {kind}, not a folder"
    return error.strerror or str(error)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
