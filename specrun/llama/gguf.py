"""What a GGUF file says about itself (for `specrun models show`), and a check that it is whole.

Both read only the header and metadata (through memory maps: tensor data is never read).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    GGMLQuantizationType,
    GGUFReader,
    GGUFValueType,
    LlamaFileType,
)

from specrun.errors import SpecrunError
from specrun.system.files import MISSING, REGULAR_FILE, what_is

GGUF_MAGIC = b"GGUF"

# tokenizer.ggml.model -> the vocabulary type llama.cpp derives from it
_VOCAB_TYPES = {
    "llama": "SPM",
    "gpt2": "BPE",
    "bert": "WPM",
    "t5": "UGM",
    "rwkv": "RWKV",
    "plamo2": "PLaMo-2",
}


class GGUFFileError(SpecrunError):
    """A model file that is missing, not GGUF, or cut short."""


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    architecture: str | None
    name: str | None
    layers: int | None
    context_length: int | None
    vocab_size: int | None
    tokenizer_model: str | None  # tokenizer.ggml.model: "gpt2", "llama", ...
    file_type: str | None  # "Q4_K_M", "F16", ...
    has_chat_template: bool
    split_count: int | None  # parts of a split GGUF; None for a single file
    tensor_count: int

    @property
    def vocab_type(self) -> str | None:
        return _VOCAB_TYPES.get(self.tokenizer_model or "", self.tokenizer_model)


def check_gguf_file(path: Path | str) -> None:
    """Raise GGUFFileError unless `path` is a GGUF whose tensor data all lies inside the file.

    Walks the header with struct rather than GGUFReader, which builds an object per token
    string and takes seconds on a 150k-token vocabulary.
    """
    path = Path(path)
    with _read_errors(path), path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if handle.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise GGUFFileError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            data_end = _Header(view).walk()
    if data_end > size:
        raise GGUFFileError(
            f"{path} is truncated: its tensor data needs {data_end} bytes, the file has {size} "
            "(an interrupted download or copy?)"
        )


@contextmanager
def _read_errors(path: Path) -> Iterator[None]:
    """A header read's failures as GGUFFileError: what is wrong with the file, in one line."""
    try:
        yield
    except FileNotFoundError:
        raise GGUFFileError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise GGUFFileError(f"{path} is a directory, not a GGUF file") from None
    except struct.error:  # a read past the end of the file
        raise GGUFFileError(
            f"{path} is truncated: its header ends early (an interrupted download or copy?)"
        ) from None
    except ValueError as exc:  # mmap of an empty file, an unknown value type
        raise GGUFFileError(f"{path} is corrupt: {exc}") from None
    except OSError as exc:
        raise GGUFFileError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_gguf_info(path: Path | str) -> GGUFInfo:
    path = Path(path)
    check_gguf_file(path)
    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError) as exc:
        raise GGUFFileError(
            f"{path} is corrupt: its GGUF metadata cannot be parsed ({exc})"
        ) from None
    architecture = _scalar(reader, "general.architecture")
    tokens = reader.get_field("tokenizer.ggml.tokens")
    file_type = _scalar(reader, "general.file_type")
    return GGUFInfo(
        path=path,
        architecture=architecture,
        name=_scalar(reader, "general.name"),
        layers=_scalar(reader, f"{architecture}.block_count"),
        context_length=_scalar(reader, f"{architecture}.context_length"),
        vocab_size=len(tokens.data) if tokens is not None else None,
        tokenizer_model=_scalar(reader, "tokenizer.ggml.model"),
        file_type=file_type_name(file_type) if file_type is not None else None,
        has_chat_template=reader.get_field("tokenizer.chat_template") is not None,
        split_count=_scalar(reader, "split.count"),
        tensor_count=len(reader.tensors),
    )


def tensor_table(path: Path | str) -> list[tuple[str, str, tuple[int, ...]]]:
    """Each tensor's name, type name and shape (ggml order: row length first)."""
    return tensors_and_metadata(path)[0]


def tensors_and_metadata(
    path: Path | str,
) -> tuple[list[tuple[str, str, tuple[int, ...]]], dict[str, Any]]:
    """The tensor table and the metadata values (all but the tokenizer's arrays), in one pass
    over the header with struct: GGUFReader builds an object per token, seconds on a large
    vocabulary, and this runs before every load that places layers or guards AMX."""
    path = Path(path)
    with (
        _read_errors(path),
        open(path, "rb") as handle,
        mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view,
    ):
        header = _Header(view)
        header.walk()
        return header.tensors, header.metadata


_SCALAR_FORMATS: dict[int, str] = {  # by GGUFValueType, as the header has it: a number
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


class _Header:
    """A cursor over a GGUF header (format: ggml's docs/gguf.md): metadata, tensor infos, where the
    data ends."""

    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer, self.offset = buffer, len(GGUF_MAGIC)
        (version,) = struct.unpack_from("<I", buffer, self.offset)
        # A big-endian file reads as a huge version with its low half zero.
        self.order = ">" if version & 0xFFFF == 0 else "<"

    def read(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(self.order + fmt, self.buffer, self.offset)
        self.offset += struct.calcsize(self.order + fmt)
        return values

    def skip(self, count: int) -> None:
        self.offset += count
        if self.offset > len(self.buffer):
            raise struct.error("past the end")

    def skip_value(self, value_type: int) -> None:
        if value_type == GGUFValueType.STRING:
            self.skip(*self.read("Q"))
        elif value_type == GGUFValueType.ARRAY:
            item_type, count = self.read("IQ")
            if item_type in _SCALAR_FORMATS:
                self.skip(count * struct.calcsize(_SCALAR_FORMATS[item_type]))
            else:
                for _ in range(count):
                    self.skip_value(item_type)
        elif value_type in _SCALAR_FORMATS:
            self.skip(struct.calcsize(_SCALAR_FORMATS[value_type]))
        else:
            raise ValueError(f"unknown GGUF value type {value_type}")

    def value(self, key: str, value_type: int) -> Any:
        """A metadata value; arrays of strings and the tokenizer's arrays are skipped (None)."""
        if value_type == GGUFValueType.STRING:
            (length,) = self.read("Q")
            text = bytes(self.buffer[self.offset : self.offset + length]).decode(
                "utf-8", errors="replace"
            )
            self.skip(length)
            return text
        if value_type == GGUFValueType.ARRAY:
            item_type, count = self.read("IQ")
            if item_type in _SCALAR_FORMATS and not key.startswith("tokenizer."):
                return self.read(f"{count}{_SCALAR_FORMATS[item_type]}")
            self.offset -= struct.calcsize(self.order + "IQ")
            self.skip_value(value_type)
            return None
        if value_type in _SCALAR_FORMATS:
            return self.read(_SCALAR_FORMATS[value_type])[0]
        raise ValueError(f"unknown GGUF value type {value_type}")

    def walk(self) -> int:
        """Read the metadata and the tensor infos; return where the tensor data ends."""
        (version,) = self.read("I")
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        tensor_count, kv_count = self.read("QQ")
        self.metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            (length,) = self.read("Q")
            key = bytes(self.buffer[self.offset : self.offset + length]).decode(
                "utf-8", errors="replace"
            )
            self.skip(length)
            (value_type,) = self.read("I")
            self.metadata[key] = self.value(key, value_type)
        alignment = self.metadata.get("general.alignment") or GGUF_DEFAULT_ALIGNMENT
        self.tensors: list[tuple[str, str, tuple[int, ...]]] = []
        end = 0
        for _ in range(tensor_count):
            (length,) = self.read("Q")
            name = bytes(self.buffer[self.offset : self.offset + length]).decode(
                "utf-8", errors="replace"
            )
            self.skip(length)
            (n_dims,) = self.read("I")
            dims = self.read(f"{n_dims}Q")
            ggml_type, offset = self.read("IQ")
            if ggml_type in _KNOWN_TYPES:  # a newer type than this gguf package knows: not checked
                kind = GGMLQuantizationType(ggml_type)
                end = max(end, offset + tensor_bytes(kind, dims))
                self.tensors.append((name, kind.name, tuple(dims)))
            else:
                self.tensors.append((name, f"type {ggml_type}", tuple(dims)))
        return -(-self.offset // alignment) * alignment + end


def tensor_bytes(kind: GGMLQuantizationType, shape: tuple[int, ...]) -> int:
    """A tensor's size in the file: whole blocks of its type."""
    block_size, type_size = GGML_QUANT_SIZES[kind]
    return math.prod(shape) * type_size // block_size


_KNOWN_TYPES = {t.value for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}


def _scalar(reader: GGUFReader, key: str) -> Any:
    found = reader.get_field(key)
    return found.contents() if found is not None else None


def file_type_name(value: int) -> str:
    """A GGUF's `general.file_type` as llama.cpp names it (Q4_K_M, F16, BF16)."""
    try:
        return LlamaFileType(value).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"type {value}"


def check_gguf_header(path: Path) -> None:
    """Fail with a clear message before llama.cpp sees a missing or non-GGUF file
    (and before opening a FIFO, which would wait for a writer forever)."""
    kind = what_is(path)
    if kind == MISSING:
        raise SpecrunError(f"model file not found: {path}")
    if kind != REGULAR_FILE:
        raise SpecrunError(f"{path} is {kind}, not a GGUF file")
    with path.open("rb") as f:
        if f.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise SpecrunError(f"{path} is not a GGUF file")
