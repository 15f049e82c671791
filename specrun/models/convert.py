"""EAGLE-3 heads and DFlash/DSpark block drafts published as Hugging Face checkpoints, converted
to GGUF once.

The published heads (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, ...) and block drafts
(z-lab/Qwen3-8B-DFlash-b16, ...) are a config.json and PyTorch or safetensors weights, and
llama.cpp loads GGUF. `fetch_converted` downloads the checkpoint
and its target's config.json and tokenizer files through specrun.models.hub (its deadlines,
progress and one-line errors, each file checked against the lock), converts them with
llama.cpp's own converter (convert_hf_to_gguf.py with --target-model-dir) and keeps the GGUF in
specrun's cache, its sha256 recorded in the integrity lock like a download's:

    $SPECRUN_CACHE/converted/<org>--<name>/for-<target org>--<target name>/<name>.gguf

The converter is the one of the llama.cpp that loads the result: the source distribution of the
installed llama-cpp-python vendors it, and pip fetches that once; the converter's files are
unpacked to $SPECRUN_CACHE/converter/llama-cpp-python-<version>/. It runs in a child process of
this interpreter and needs torch, transformers and sentencepiece (`pip install
'specrun[convert]'`). The GGUF is written under a temporary name and moved into place whole, so
a conversion that fails or is stopped leaves no file behind.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from specrun.errors import Interrupted, SpecrunError
from specrun.models.cache import cached_names, check_hub_names, hub_cache_dir
from specrun.models.hub import (
    FetchPlan,
    NotCached,
    delete_cached_names,
    fetch_picked,
    free_bytes,
    hub_offline,
    plan_picked,
)
from specrun.models.lock import CONVERTED, IntegrityError, LockRecord, check_integrity, forget
from specrun.system.files import replaced_atomically
from specrun.system.formatting import format_size
from specrun.system.interrupts import exit_status
from specrun.system.paths import cache_dir

CONVERT_EXTRA = "pip install 'specrun[convert]'"
# What convert_hf_to_gguf.py imports for a Llama-style head beyond specrun's own dependencies
# (numpy, and gguf's PyYAML, tqdm and requests): its tensors are torch's, the tokenizer is read
# with transformers, and the Llama path tries SentencePiece first.
CONVERTER_MODULES = ("torch", "transformers", "sentencepiece")
LLAMA_PACKAGE = "llama-cpp-python"
CONVERTER_SCRIPT = "convert_hf_to_gguf.py"
OUTTYPE = "auto"  # the converter's default: the checkpoint's own 16-bit type (bf16 or f16)
_FOUND = "found converted in specrun's cache"
# The parts of the llama.cpp tree the converter reads (vendor/llama.cpp/ in the sdist).
_CONVERTER_PARTS = ("conversion/", "gguf-py/gguf/", "models/templates/")
_CONVERTER_FILES = (CONVERTER_SCRIPT, "LICENSE")
# A target's files the converter reads: its config and whatever tokenizer it ships.
TARGET_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "tekken.json",
        "chat_template.jinja",
    }
)
_TOKENIZERS = ("tokenizer.json", "tokenizer.model", "vocab.json", "tekken.json")
CHECKPOINT_FILES = "config.json and model*.safetensors or pytorch_model*.bin"
TARGET_WHAT = "target config and tokenizer (config.json and tokenizer.json or tokenizer.model)"


class ConversionError(SpecrunError):
    """A checkpoint that could not be converted: the extra missing, the converter unavailable,
    or the converter failing on it."""


@dataclass(frozen=True)
class CheckpointKind:
    """What a kind of checkpoint converts to, in llama.cpp's words and the user's."""

    architecture: str  # general.architecture of the converted GGUF
    checkpoint: str  # its checkpoint, named in a listing's refusal
    converted: str  # what the GGUF must be, named in a refusal of the converter's output


CHECKPOINT_KINDS = {
    "eagle3": CheckpointKind(
        "eagle3",
        "EAGLE-3 checkpoint",
        "an EAGLE-3 head (a checkpoint with draft_vocab_size and one layer in its config.json)",
    ),
    "dflash": CheckpointKind(
        "dflash",
        "DFlash or DSpark checkpoint",
        "a DFlash or DSpark block draft (a checkpoint whose config.json names DFlashDraftModel "
        "or a DSpark draft model)",
    ),
}


@dataclass(frozen=True)
class Checkpoint:
    """A head's or block draft's Hugging Face checkpoint (`kind`: "eagle3" or "dflash") and the
    repo of the target it was made for, whose config.json and tokenizer the converter reads. The
    names are checked when it is made, so the paths built from them stay in the caches."""

    repo: str
    target_repo: str
    kind: str = "eagle3"

    def __post_init__(self) -> None:
        check_hub_names(self.repo)
        check_hub_names(self.target_repo)
        if self.kind not in CHECKPOINT_KINDS:
            raise ValueError(f"no checkpoint kind {self.kind!r}")

    @property
    def what(self) -> CheckpointKind:
        return CHECKPOINT_KINDS[self.kind]

    @property
    def relative_path(self) -> str:
        """The GGUF under `converted/`, also its key in the lock (after `converted/`)."""
        name = self.repo.split("/")[1]
        target = self.target_repo.replace("/", "--")
        return f"{self.repo.replace('/', '--')}/for-{target}/{name}.gguf"

    @property
    def gguf_path(self) -> Path:
        return converted_dir() / self.relative_path


def converted_dir() -> Path:
    return cache_dir() / "converted"


# --- which files ----------------------------------------------------------------------------


def _checkpoint_names(names: Iterable[str]) -> list[str]:
    """The files of a checkpoint the converter reads, of those listed (top level only)."""
    return sorted(
        n
        for n in names
        if "/" not in n
        and (
            n == "config.json"
            or (n.startswith("model") and n.endswith((".safetensors", ".safetensors.index.json")))
            or (n.startswith("pytorch_model") and n.endswith((".bin", ".bin.index.json")))
        )
    )


def pick_checkpoint(names: Collection[str]) -> tuple[str, ...] | None:
    """config.json and the weights, safetensors before PyTorch's (as the converter prefers);
    None where either is missing."""
    listed = _checkpoint_names(names)
    if "config.json" not in listed:
        return None
    for prefix, suffix in (("model", ".safetensors"), ("pytorch_model", ".bin")):
        weights = [n for n in listed if n.startswith(prefix) and n.endswith(suffix)]
        if weights:
            index = [n for n in listed if n == f"{prefix}{suffix}.index.json"]
            return ("config.json", *index, *weights)
    return None


def pick_target_files(names: Collection[str]) -> tuple[str, ...] | None:
    """The target's config.json and tokenizer files; None without both."""
    listed = sorted(n for n in names if n in TARGET_FILES)
    if "config.json" not in listed or not any(n in _TOKENIZERS for n in listed):
        return None
    return tuple(listed)


@dataclass(frozen=True)
class ConversionPlan:
    checkpoint: Checkpoint
    converted: bool  # the GGUF is there already: nothing to fetch or convert
    fetches: tuple[FetchPlan, ...]  # the checkpoint's files, then the target's


def plan_conversion(checkpoint: Checkpoint, label: str, *, network: bool) -> ConversionPlan:
    """What `fetch_converted` would do: nothing where the GGUF exists, else fetch and convert."""
    if checkpoint.gguf_path.is_file():
        return ConversionPlan(checkpoint, True, ())
    return ConversionPlan(
        checkpoint,
        False,
        (
            plan_picked(
                checkpoint.repo,
                pick_checkpoint,
                f"{checkpoint.what.checkpoint} ({CHECKPOINT_FILES})",
                label,
                network=network,
            ),
            plan_picked(
                checkpoint.target_repo, pick_target_files, TARGET_WHAT, label, network=network
            ),
        ),
    )


def missing_modules() -> tuple[str, ...]:
    return tuple(m for m in CONVERTER_MODULES if importlib.util.find_spec(m) is None)


# --- the GGUF ---------------------------------------------------------------------------------


def fetch_converted(
    checkpoint: Checkpoint, label: str, *, download: bool = True, progress: bool = True
) -> Path:
    """The head's GGUF, converted first if `download` allows it. `download` also means the file
    is about to be used, so its sha256 is checked against the lock first."""
    path = checkpoint.gguf_path
    if path.is_file():
        if download:
            check_integrity(
                CONVERTED,
                checkpoint.relative_path,
                path,
                label,
                pin=None,
                progress=progress,
                rehash=False,
                origin=_FOUND,
            )
        return path
    if not download:
        raise NotCached(f"{label} is not converted yet ({path}): run `specrun models pull {label}`")
    return convert(checkpoint, label, progress=progress)


def convert(checkpoint: Checkpoint, label: str, *, progress: bool = True) -> Path:
    """Fetch the checkpoint and the target's config and tokenizer, convert them with llama.cpp's
    converter into the GGUF's place, and record its sha256 in the lock."""
    missing = missing_modules()
    if missing:
        raise ConversionError(
            f"{label} is published as a Hugging Face checkpoint ({checkpoint.repo}) that specrun "
            f"converts to GGUF once with llama.cpp's converter, which needs {', '.join(missing)}: "
            f"{CONVERT_EXTRA}"
        )
    plan = plan_conversion(checkpoint, label, network=not hub_offline())
    output = checkpoint.gguf_path
    if plan.converted:  # by another run, meanwhile
        return output
    head_plan = plan.fetches[0]
    needed = sum(f.size or 0 for f in head_plan.files)  # the GGUF: about the weights' size
    room = free_bytes(output.parent)
    if needed > room:
        raise ConversionError(
            f"converting {checkpoint.repo} needs about {format_size(needed)} in "
            f"{converted_dir()}, which has {format_size(room)} free; free some space or set "
            "SPECRUN_CACHE to a larger disk"
        )
    try:
        converter = converter_dir(progress=progress)
        head_files, target_files = fetch_picked(plan.fetches, label, progress=progress)
        _run_converter(
            converter,
            checkpoint,
            dict(zip((f.name for f in head_plan.files), head_files)),
            dict(zip((f.name for f in plan.fetches[1].files), target_files)),
            progress=progress,
        )
    except KeyboardInterrupt as stop:  # Ctrl-C, SIGTERM or SIGHUP
        raise Interrupted(
            f"conversion of {label} interrupted; nothing was kept, the next run converts again",
            exit_status(stop),
        ) from None
    commits = ", ".join(
        f"{repo}{_at_commit(paths[0])}"
        for repo, paths in ((checkpoint.repo, head_files), (checkpoint.target_repo, target_files))
    )
    check_integrity(
        CONVERTED,
        checkpoint.relative_path,
        output,
        label,
        pin=None,
        progress=False,
        rehash=False,
        origin=f"converted from {commits} by llama.cpp's {CONVERTER_SCRIPT} "
        f"({LLAMA_PACKAGE} {llama_version()})",
    )
    return output


def _at_commit(path: Path) -> str:
    """`@<commit>` of a file in huggingface_hub's cache (snapshots/<commit>/<name>)."""
    return f"@{path.parent.name[:12]}" if path.parent.parent.name == "snapshots" else ""


def converter_command(
    converter: Path, head_dir: Path, target_dir: Path, outfile: Path
) -> list[str]:
    return [
        sys.executable,
        str(converter / CONVERTER_SCRIPT),
        str(head_dir),
        "--target-model-dir",
        str(target_dir),
        "--outtype",
        OUTTYPE,
        "--outfile",
        str(outfile),
    ]


def _run_converter(
    converter: Path,
    checkpoint: Checkpoint,
    head_files: dict[str, Path],
    target_files: dict[str, Path],
    *,
    progress: bool,
) -> None:
    """The converter over folders of links to the cached files (one snapshot's worth each,
    whatever commits they came from), its output checked before it takes the GGUF's place."""
    output = checkpoint.gguf_path
    log = output.with_name(f"{output.name}.convert.log")
    with tempfile.TemporaryDirectory(dir=_made(output.parent), prefix=".inputs-") as scratch:
        # Named as the repos are: the converter takes the model's name from its folder's.
        head_dir = Path(scratch, "checkpoint", checkpoint.repo.split("/")[1])
        target_dir = Path(scratch, "target", checkpoint.target_repo.split("/")[1])
        _link_files(head_files, head_dir)
        _link_files(target_files, target_dir)
        if progress:
            print(
                f"Converting {checkpoint.repo} to GGUF with llama.cpp's {CONVERTER_SCRIPT} "
                f"({LLAMA_PACKAGE} {llama_version()}); its output: {log}",
                file=sys.stderr,
                flush=True,
            )
        with replaced_atomically(output) as temporary:
            command = converter_command(converter, head_dir, target_dir, temporary)
            _run_logged(command, log, checkpoint)
            _check_output(temporary, checkpoint)
    log.unlink(missing_ok=True)


def _made(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConversionError(f"cannot make {folder}: {error.strerror or error}") from None
    return folder


def _link_files(files: dict[str, Path], folder: Path) -> None:
    folder.mkdir(parents=True)
    for name, path in files.items():
        try:
            (folder / name).symlink_to(path.resolve())
        except OSError:  # no symbolic links here (Windows without the right): a copy then
            shutil.copyfile(path, folder / name)


def _run_logged(command: list[str], log: Path, checkpoint: Checkpoint) -> None:
    """Run the converter with its output in `log`; stopped with this process, never left
    writing after it."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("NO_LOCAL_GGUF", None)  # the gguf-py beside the converter, made for it
    try:
        with log.open("wb") as output:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env
            )
            try:
                status = process.wait()
            except BaseException:
                _end(process)
                log.unlink(missing_ok=True)
                raise
    except OSError as error:
        raise ConversionError(
            f"cannot run llama.cpp's converter ({command[0]}): {error.strerror or error}"
        ) from None
    if status != 0:
        why = (
            f"it was ended by {signal.Signals(-status).name}"
            + (" (out of memory?)" if status == -getattr(signal, "SIGKILL", 9) else "")
            if status < 0
            else _last_line(log.read_text(encoding="utf-8", errors="replace"))
        )
        raise ConversionError(
            f"converting {checkpoint.repo} to GGUF failed: {why}; the converter's output is in "
            f"{log}"
        )


def _end(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else "no output"
    return line if len(line) <= 300 else line[:297] + "..."


def _check_output(path: Path, checkpoint: Checkpoint) -> None:
    """The converter's file must be a whole GGUF of the checkpoint's kind."""
    from specrun.llama.gguf import GGUFFileError, check_gguf_file, read_gguf_info

    try:
        check_gguf_file(path)
        architecture = read_gguf_info(path).architecture
    except GGUFFileError as error:
        raise ConversionError(f"the converter's output for {checkpoint.repo}: {error}") from None
    wanted = checkpoint.what
    if architecture != wanted.architecture:
        raise ConversionError(
            f"{checkpoint.repo} converted to a {architecture} model, not {wanted.converted}; it "
            "is not kept"
        )


# --- llama.cpp's converter ------------------------------------------------------------------


def llama_version() -> str:
    try:
        return importlib.metadata.version(LLAMA_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ConversionError(
            f"{LLAMA_PACKAGE} is not installed, and its llama.cpp source has the converter"
        ) from None


def converter_dir(*, progress: bool = True) -> Path:
    """llama.cpp's converter of the installed llama-cpp-python, fetched and unpacked once."""
    version = llama_version()
    folder = cache_dir() / "converter" / f"{LLAMA_PACKAGE}-{version}"
    if (folder / CONVERTER_SCRIPT).is_file():
        return folder
    if progress:
        print(
            f"Fetching llama.cpp's converter: the source of {LLAMA_PACKAGE} {version}, with pip",
            file=sys.stderr,
            flush=True,
        )
    with tempfile.TemporaryDirectory(dir=_made(folder.parent), prefix=".fetching-") as scratch:
        unpack_converter(download_sdist(version, Path(scratch)), folder)
    return folder


def download_sdist(version: str, folder: Path) -> Path:
    """The llama-cpp-python sdist of `version`, with this interpreter's pip (its index, proxy
    and cache settings)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--dest",
        str(folder),
        f"{LLAMA_PACKAGE}=={version}",
    ]
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace"
        )
    except OSError as error:
        raise ConversionError(f"cannot run pip ({sys.executable}): {error.strerror}") from None
    sdists = sorted(folder.glob("*.tar.gz"))
    if done.returncode != 0 or not sdists:
        why = _last_line(done.stderr or done.stdout)
        raise ConversionError(
            f"cannot fetch llama.cpp's converter, the source of {LLAMA_PACKAGE} {version}, with "
            f"pip ({why}); the conversion needs it once, with the network on"
        )
    return sdists[0]


def unpack_converter(sdist: Path, destination: Path) -> None:
    """The converter's files of the sdist's vendor/llama.cpp/ into `destination`, whole: only
    regular files, only the parts the converter reads, only paths that stay inside."""
    try:
        with tarfile.open(sdist, "r:*") as archive:
            members = archive.getmembers()
            scripts = [
                m.name
                for m in members
                if m.isfile() and m.name.split("/")[1:] == ["vendor", "llama.cpp", CONVERTER_SCRIPT]
            ]
            if not scripts:
                raise ConversionError(
                    f"{sdist.name} has no vendor/llama.cpp/{CONVERTER_SCRIPT}: not the source of "
                    f"{LLAMA_PACKAGE}"
                )
            base = scripts[0].removesuffix(CONVERTER_SCRIPT)
            with tempfile.TemporaryDirectory(dir=destination.parent, prefix=".unpacking-") as tmp:
                tree = Path(tmp) / "tree"
                for member in members:
                    relative = member.name.removeprefix(base)
                    if not (member.isfile() and member.name.startswith(base)):
                        continue
                    if not _wanted(relative):
                        continue
                    target = tree.joinpath(*relative.split("/"))
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = archive.extractfile(member)
                    assert source is not None  # a regular file
                    with source, target.open("wb") as copy:
                        shutil.copyfileobj(source, copy)
                try:
                    os.replace(tree, destination)
                except OSError:  # another run unpacked it first
                    if not (destination / CONVERTER_SCRIPT).is_file():
                        raise
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ConversionError(
            f"cannot unpack llama.cpp's converter from {sdist}: {error}"
        ) from None


def _wanted(relative: str) -> bool:
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\\" in relative or ":" in parts[0]:
        return False
    return relative in _CONVERTER_FILES or relative.startswith(_CONVERTER_PARTS)


# --- removal and checks ---------------------------------------------------------------------


def delete_converted(checkpoint: Checkpoint, label: str) -> int:
    """Delete the GGUF and the checkpoint's files from the Hugging Face cache; returns the bytes
    freed. The target's config and tokenizer stay: its repo's folder may hold more of it."""
    path = checkpoint.gguf_path
    freed = None
    with contextlib.suppress(OSError):  # the log of a failed conversion
        path.with_name(f"{path.name}.convert.log").unlink()
    if path.is_file():
        freed = path.stat().st_size
        path.unlink()
        forget(CONVERTED, [checkpoint.relative_path])
    if path.parent.is_dir():
        for folder in (path.parent, path.parent.parent):
            try:
                folder.rmdir()
            except OSError:  # not empty
                break
    names = _checkpoint_names(cached_names(hub_cache_dir(), checkpoint.repo))
    downloaded = delete_cached_names(checkpoint.repo, names)
    if freed is None and downloaded is None:
        raise NotCached(
            f"{label} is neither converted ({path}) nor in the Hugging Face cache "
            f"({hub_cache_dir()}); nothing to remove"
        )
    return (freed or 0) + (downloaded or 0)


def verify_converted(
    checkpoint: Checkpoint, label: str
) -> list[tuple[str, LockRecord | IntegrityError]]:
    """Hash the GGUF again, whatever its size and mtime say, against the lock's record."""
    path = checkpoint.gguf_path
    if not path.is_file():
        raise NotCached(f"{label} is not converted yet ({path}): run `specrun models pull {label}`")
    try:
        record = check_integrity(
            CONVERTED,
            checkpoint.relative_path,
            path,
            label,
            pin=None,
            progress=True,
            rehash=True,
            origin=_FOUND,
        )
    except IntegrityError as problem:
        return [(path.name, problem)]
    return [(path.name, record)]
