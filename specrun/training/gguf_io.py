"""The GGUF side of training: what a head borrows from its target, and the head's file.

The head's file is what llama.cpp's converter writes for an EAGLE-3 checkpoint
(`conversion/llama.py`): architecture `eagle3`, `d2t` as absolute target ids (I64), no
token embeddings or output of the target's width (it borrows the target's embeddings
through its context), the target's tokenizer. It also names the target it was trained
for (`specrun.eagle3.target.*`), which `open_eagle3` checks.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf
import numpy as np

from specrun.errors import SpecrunError
from specrun.llama.heads import TRAINED_FOR_KEYS
from specrun.system.files import replaced_atomically

ARCH = "eagle3"
# What a head records of its target, which `open_eagle3` compares.
TARGET_NAME_KEY, TARGET_ARCH_KEY, TARGET_LAYERS_KEY = (
    f"specrun.{ARCH}.target.{key}" for key, _ in TRAINED_FOR_KEYS
)


@dataclass(frozen=True)
class HeadShape:
    """What the exported GGUF's metadata says, and all the module needs to be built."""

    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    target_layers: tuple[int, int, int]
    draft_vocab: int
    rope_base: float
    eps: float

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class TargetWeights:
    """The target's hyperparameters and the rows a head starts from."""

    name: str
    architecture: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx_train: int
    rope_base: float
    eps: float
    embeddings: np.ndarray  # float32 [n_vocab, n_embd]
    output: np.ndarray | None  # float32 [n_vocab, n_embd], None where tied to the embeddings
    output_norm: np.ndarray  # float32 [n_embd]
    tokenizer: list[gguf.ReaderField]


def _tensor(reader: gguf.GGUFReader, name: str) -> np.ndarray | None:
    found = next((t for t in reader.tensors if t.name == name), None)
    if found is None:
        return None
    data = gguf.quants.dequantize(found.data, found.tensor_type)
    return np.array(data, np.float32).reshape(  # a copy: the reader's arrays are read-only
        [int(n) for n in reversed(found.shape.tolist())]
    )


def read_target(path: Path) -> TargetWeights:
    """The target's shape, embeddings, output rows and tokenizer, read from its GGUF."""
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as error:
        raise SpecrunError(f"cannot read {path.name} as GGUF: {error}") from None

    def value(key: str, default: object = None) -> object:
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    arch = str(value("general.architecture"))

    def number(key: str, default: float | None = None) -> float:
        found = value(f"{arch}.{key}", default)
        if isinstance(found, list):  # one per layer (OpenELM, Gemma 3n): the head takes the widest
            found = max(found) if found else default
        if found is None:
            raise SpecrunError(f"{path.name} has no {arch}.{key}: not a target a head can learn")
        return float(found)  # type: ignore[arg-type]

    embeddings = _tensor(reader, "token_embd.weight")
    output_norm = _tensor(reader, "output_norm.weight")
    if embeddings is None or output_norm is None:
        raise SpecrunError(f"{path.name} has no token embeddings or output norm to start a head")
    n_head = int(number("attention.head_count"))
    return TargetWeights(
        name=str(value("general.name", "")),  # "" as llama.cpp reads a missing one
        architecture=arch,
        n_layer=int(number("block_count")),
        n_embd=int(number("embedding_length")),
        n_head=n_head,
        n_head_kv=int(number("attention.head_count_kv", n_head)),
        # A mixture of experts names no dense width: the head's FFN is then 8/3 of its own.
        n_ff=int(number("feed_forward_length", 8 * int(number("embedding_length")) // 3)),
        n_ctx_train=int(number("context_length")),
        rope_base=number("rope.freq_base", 10000.0),
        eps=number("attention.layer_norm_rms_epsilon", 1e-5),
        embeddings=embeddings,
        output=_tensor(reader, "output.weight"),
        output_norm=output_norm,
        tokenizer=[f for name, f in reader.fields.items() if name.startswith("tokenizer.")],
    )


def write_head(
    path: Path,
    target: TargetWeights,
    *,
    name: str,
    shape: HeadShape,
    tensors: dict[str, np.ndarray],
    d2t: np.ndarray,
) -> Path:
    """Write the head's GGUF atomically: matrices F16, norms F32, d2t I64."""
    with replaced_atomically(path) as temporary:
        writer = gguf.GGUFWriter(os.fspath(temporary), ARCH)
        writer.add_name(name)
        writer.add_array(f"{ARCH}.target_layers", [int(i) for i in shape.target_layers])
        writer.add_uint32(f"{ARCH}.target_hidden_size", target.n_embd)
        writer.add_context_length(target.n_ctx_train)
        writer.add_embedding_length(shape.n_embd)
        writer.add_block_count(1)
        writer.add_feed_forward_length(shape.n_ff)
        writer.add_head_count(shape.n_head)
        writer.add_head_count_kv(shape.n_head_kv)
        writer.add_rope_dimension_count(shape.head_dim)
        writer.add_rope_freq_base(shape.rope_base)
        writer.add_layer_norm_rms_eps(shape.eps)
        writer.add_vocab_size(len(target.embeddings))
        writer.add_string(TARGET_NAME_KEY, target.name)
        writer.add_string(TARGET_ARCH_KEY, target.architecture)
        writer.add_uint32(TARGET_LAYERS_KEY, target.n_layer)
        for field in target.tokenizer:
            kind = field.types[0]
            sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), kind, sub)
        for tensor_name, tensor in tensors.items():
            matrix = tensor.ndim == 2
            writer.add_tensor(
                tensor_name, np.ascontiguousarray(tensor, np.float16 if matrix else np.float32)
            )
        writer.add_tensor("d2t", np.asarray(d2t, np.int64), raw_dtype=gguf.GGMLQuantizationType.I64)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return path
