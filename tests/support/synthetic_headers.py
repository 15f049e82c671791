"""GGUF headers of models too large to ship, as `footprint()` takes them: (tensors, metadata).

Tensor types follow llama.cpp's Q4_K_M rule (llama_tensor_get_type in llama-quant.cpp): Q4_K
by default; Q6_K for the output (for token_embd when the embeddings are tied) and for attn_v
and ffn_down in the layers `use_more_bits` picks; other attn_v Q5_K in a 70B model; norms F32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

Tensor = tuple[str, str, tuple[int, ...]]


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's choice of the layers that keep more bits: the first and last eighth, every third
    between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def llama_q4_k_m(
    *,
    n_layer: int,
    n_embd: int,
    n_ff: int,
    n_head: int,
    n_head_kv: int,
    head_dim: int,
    n_vocab: int,
    tied: bool,
    is_70b: bool = False,
) -> tuple[list[Tensor], dict[str, Any]]:
    n_kv = n_head_kv * head_dim
    tensors: list[Tensor] = [
        ("token_embd.weight", "Q6_K" if tied else "Q4_K", (n_embd, n_vocab)),
        ("rope_freqs.weight", "F32", (head_dim // 2,)),  # llama 3's rope scaling factors
        ("output_norm.weight", "F32", (n_embd,)),
    ]
    if not tied:
        tensors.append(("output.weight", "Q6_K", (n_embd, n_vocab)))
    for i in range(n_layer):
        more_bits = use_more_bits(i, n_layer)
        attn_v = "Q6_K" if more_bits else "Q5_K" if is_70b else "Q4_K"
        tensors += [
            (f"blk.{i}.attn_norm.weight", "F32", (n_embd,)),
            (f"blk.{i}.attn_q.weight", "Q4_K", (n_embd, n_head * head_dim)),
            (f"blk.{i}.attn_k.weight", "Q4_K", (n_embd, n_kv)),
            (f"blk.{i}.attn_v.weight", attn_v, (n_embd, n_kv)),
            (f"blk.{i}.attn_output.weight", "Q4_K", (n_head * head_dim, n_embd)),
            (f"blk.{i}.ffn_norm.weight", "F32", (n_embd,)),
            (f"blk.{i}.ffn_gate.weight", "Q4_K", (n_embd, n_ff)),
            (f"blk.{i}.ffn_up.weight", "Q4_K", (n_embd, n_ff)),
            (f"blk.{i}.ffn_down.weight", "Q6_K" if more_bits else "Q4_K", (n_ff, n_embd)),
        ]
    meta = {
        "general.architecture": "llama",
        "llama.block_count": n_layer,
        "llama.embedding_length": n_embd,
        "llama.feed_forward_length": n_ff,
        "llama.attention.head_count": n_head,
        "llama.attention.head_count_kv": n_head_kv,
        "llama.attention.key_length": head_dim,
        "llama.attention.value_length": head_dim,
        "llama.vocab_size": n_vocab,
        "llama.context_length": 131072,
    }
    return tensors, meta


def llama_70b_q4_k_m() -> tuple[list[Tensor], dict[str, Any]]:
    """Llama-3.3-70B-Instruct Q4_K_M (a 42.5 GB file)."""
    return llama_q4_k_m(
        n_layer=80,
        n_embd=8192,
        n_ff=28672,
        n_head=64,
        n_head_kv=8,
        head_dim=128,
        n_vocab=128256,
        tied=False,
        is_70b=True,
    )


def llama_1b_q4_k_m() -> tuple[list[Tensor], dict[str, Any]]:
    """Llama-3.2-1B-Instruct Q4_K_M (a 0.81 GB file; its output is the token embedding)."""
    return llama_q4_k_m(
        n_layer=16,
        n_embd=2048,
        n_ff=8192,
        n_head=32,
        n_head_kv=8,
        head_dim=64,
        n_vocab=128256,
        tied=True,
    )


def llama_8b_q4_k_m() -> tuple[list[Tensor], dict[str, Any]]:
    """Llama-3.1-8B-Instruct Q4_K_M (a 4.9 GB file)."""
    return llama_q4_k_m(
        n_layer=32,
        n_embd=4096,
        n_ff=14336,
        n_head=32,
        n_head_kv=8,
        head_dim=128,
        n_vocab=128256,
        tied=False,
    )


def write_header(path: Path, tensors: list[Tensor], meta: dict[str, Any]) -> Path:
    """A GGUF file of the header alone: the metadata and the tensor table, no tensor data. What
    specrun reads before a load (the estimate, the placement) takes it; llama.cpp cannot load it."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(path, meta["general.architecture"])
    for key, value in meta.items():
        if key == "general.architecture":
            continue
        if isinstance(value, int):
            writer.add_uint32(key, value)
        else:
            writer.add_string(key, str(value))
    for name, type_name, shape in tensors:
        kind = gguf.GGMLQuantizationType[type_name]
        block, size = gguf.GGML_QUANT_SIZES[kind]
        values = 1
        for n in shape:
            values *= n
        # add_tensor_info takes numpy's order (the last dimension first in the file's table).
        writer.add_tensor_info(
            name, tuple(reversed(shape)), np.dtype(np.float32), values // block * size, kind
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path
