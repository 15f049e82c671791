"""GGUF models with real shapes and random weights, for measuring costs, not answers.

What a forward pass costs depends on the shapes and on the kernels each weight type
takes, not on the values. So the weights are random blocks of the real storage types
(a pool of valid blocks tiled over each tensor, scales set so activations stay finite),
written tensor by tensor without ever quantizing: a 70B-shaped Q4_K_M file takes as
long as the disk needs. Target and draft share one vocabulary, as a real pair does.

The mixes are llama.cpp's own (llama-quant.cpp): Q6_K for the output (the token embedding
where the output is tied to it), and in Q4_K_M for `attn_v` and `ffn_down` in the layers
its `use_more_bits` picks; Q4_K or Q4_0 elsewhere. So the files are as large as the
published ones (tests/e2e/test_gpu_kit.py checks it).

    python bench/gpu/synthetic.py SHAPE TYPE OUT.gguf     # e.g. llama3-8b q4_k_m
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    tied_output: bool = False  # the output reuses token_embd (Llama 3.2 1B)


LLAMA3_VOCAB = 128256
SHAPES = {  # the published configs
    "llama3-70b": Shape(8192, 80, 64, 8, 28672, LLAMA3_VOCAB, 8192),
    "llama3-8b": Shape(4096, 32, 32, 8, 14336, LLAMA3_VOCAB, 8192),
    "llama3.2-1b": Shape(2048, 16, 32, 8, 8192, LLAMA3_VOCAB, 8192, tied_output=True),
    # The CPU mode: the same code on shapes a 2-core machine runs in seconds.
    "tiny-target": Shape(256, 4, 4, 2, 768, 8192, 2048),
    "tiny-draft": Shape(
        256, 2, 4, 2, 512, 8192, 2048, tied_output=True
    ),  # K-quant rows: 256 values
}
TYPES = ("q4_k_m", "q4_0", "f16")
FILE_TYPES = {
    "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
}
# Byte offset and value of each block's f16 scale(s): dequantized weights of about 0.02.
SCALES = {Q.Q4_0: {0: 3e-3}, Q.Q4_K: {0: 1e-4, 2: 1e-4}, Q.Q6_K: {208: 3e-5}}
POOL_BLOCKS = 1 << 16


def use_more_bits(layer: int, n_layer: int) -> bool:
    """llama.cpp's choice of the Q4_K_M layers that keep 6 bits."""
    return layer < n_layer // 8 or layer >= 7 * n_layer // 8 or (layer - n_layer // 8) % 3 == 2


def weight_type(
    name: str, layer: int | None, n_layer: int, file_type: str, tied: bool = False
) -> Q:
    if file_type == "f16":
        return Q.F16
    if name == "output" or (name == "token_embd" and tied):
        return Q.Q6_K
    if file_type == "q4_0":
        return Q.Q4_0
    if name in ("attn_v", "ffn_down") and layer is not None and use_more_bits(layer, n_layer):
        return Q.Q6_K
    return Q.Q4_K


def tensors(shape: Shape, file_type: str) -> list[tuple[str, tuple[int, int] | tuple[int], Q]]:
    """(name, (rows, columns) or (n,), type) in llama.cpp's order."""
    head_dim = shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head_dim
    out: list[tuple[str, tuple[int, ...], Q]] = [
        (
            "token_embd.weight",
            (shape.n_vocab, shape.n_embd),
            weight_type("token_embd", None, 0, file_type, shape.tied_output),
        )
    ]
    for i in range(shape.n_layer):

        def w(name: str, rows: int, columns: int, i: int = i) -> tuple[str, tuple[int, int], Q]:
            return (
                f"blk.{i}.{name}.weight",
                (rows, columns),
                weight_type(name, i, shape.n_layer, file_type),
            )

        out += [
            (f"blk.{i}.attn_norm.weight", (shape.n_embd,), Q.F32),
            w("attn_q", shape.n_embd, shape.n_embd),
            w("attn_k", kv, shape.n_embd),
            w("attn_v", kv, shape.n_embd),
            w("attn_output", shape.n_embd, shape.n_embd),
            (f"blk.{i}.ffn_norm.weight", (shape.n_embd,), Q.F32),
            w("ffn_gate", shape.n_ff, shape.n_embd),
            w("ffn_up", shape.n_ff, shape.n_embd),
            w("ffn_down", shape.n_embd, shape.n_ff),
        ]
    out.append(("output_norm.weight", (shape.n_embd,), Q.F32))
    if not shape.tied_output:
        out.append(
            (
                "output.weight",
                (shape.n_vocab, shape.n_embd),
                weight_type("output", None, 0, file_type),
            )
        )
    return out


def storage_shape(dims: tuple[int, ...], kind: Q) -> tuple[tuple[int, ...], np.dtype]:
    """How a tensor is stored: values for F32/F16, rows of block bytes for quantized types."""
    if kind in (Q.F32, Q.F16):
        return dims, np.dtype(np.float32 if kind == Q.F32 else np.float16)
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    return (dims[0], dims[1] // block_values * block_bytes), np.dtype(np.uint8)


def data_bytes(shape: Shape, file_type: str) -> int:
    """The tensor data of the file: within a few MB (metadata, padding) of its size."""
    total = 0
    for _, dims, kind in tensors(shape, file_type):
        stored, dtype = storage_shape(dims, kind)
        total += int(np.prod(stored)) * dtype.itemsize
    return total


def block_pool(kind: Q, rng: np.random.Generator) -> np.ndarray:
    """POOL_BLOCKS valid blocks of `kind` as raw bytes, or values for F16/F32."""
    if kind == Q.F16:
        return (rng.standard_normal(POOL_BLOCKS * 32) * 0.02).astype(np.float16)
    _, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    pool = rng.integers(0, 256, size=(POOL_BLOCKS, block_bytes), dtype=np.uint8)
    for offset, scale in SCALES[kind].items():
        scales = (rng.uniform(0.5, 1.5, POOL_BLOCKS) * scale).astype(np.float16)
        pool[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return pool


def tensor_data(shape: tuple[int, ...], kind: Q, pools: dict[Q, np.ndarray]) -> np.ndarray:
    if kind == Q.F32:
        return np.ones(shape, dtype=np.float32)  # the norms
    stored, _ = storage_shape(shape, kind)
    return np.resize(pools[kind], stored)  # the pool, repeated


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style: control tokens, the 256 byte tokens, then word pieces `▁w<i>`,
    so any text tokenizes (byte fallback where no piece matches)."""
    T = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256
    words = [f"▁w{i}" for i in range(n_vocab - len(tokens))]
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(words))]
    return tokens + words, scores, [int(t) for t in types] + [int(T.NORMAL)] * len(words)


def write_model(path: Path, shape: Shape, file_type: str, seed: int = 0) -> Path:
    """Write `shape` at `file_type` to `path` (through a temporary name, so a partial file
    never looks finished)."""
    rng = np.random.default_rng(seed)
    layout = tensors(shape, file_type)
    pools = {kind: block_pool(kind, rng) for kind in {kind for *_, kind in layout} - {Q.F32}}
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_name(f"synthetic {path.stem}")
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(FILE_TYPES[file_type])
    tokens, scores, types = vocabulary(shape.n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    for name, dims, kind in layout:
        stored, dtype = storage_shape(dims, kind)
        writer.add_tensor_info(
            name,
            stored,
            dtype,
            int(np.prod(stored)) * dtype.itemsize,
            raw_dtype=None if kind in (Q.F32, Q.F16) else kind,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, dims, kind in layout:
        writer.write_tensor_data(tensor_data(dims, kind, pools))
    writer.close()
    partial.replace(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("shape", choices=SHAPES, metavar="SHAPE", help=", ".join(SHAPES))
    parser.add_argument(
        "type", choices=TYPES, metavar="TYPE", help=f"{', '.join(TYPES)}: llama.cpp's mixes"
    )
    parser.add_argument("out", type=Path, metavar="OUT.gguf", help="the file to write")
    args = parser.parse_args()
    out = write_model(args.out, SHAPES[args.shape], args.type)
    print(f"{out}: {out.stat().st_size / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
