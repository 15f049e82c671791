"""GGUF models with real shapes and random weights, for measuring costs, not answers.

What a forward pass costs depends on the shapes and on the kernels each weight type
takes, not on the values. So the weights are random blocks of the real storage types
(a pool of valid blocks tiled over each tensor, scales set so activations stay finite),
written tensor by tensor without ever quantizing: a 70B-shaped Q4_K_M file takes as
long as the disk needs. Target and draft share one vocabulary, as a real pair does.

The mixes are llama.cpp's own (llama-quant.cpp): Q6_K for the output (the token embedding
where the output is tied to it), and in Q4_K_M for `attn_v` and `ffn_down` in the layers
its `use_more_bits` picks; Q4_K or Q4_0 elsewhere; a row a 256-value block does not fit
falls back as llama.cpp's does (Q4_K to Q5_0, Q6_K to Q8_0). So the files are as large as
the published ones (tests/e2e/test_gpu_kit.py checks it).

Besides a plain llama target or draft, for drafting from the target's hidden states:
- `--head eagle3`: an EAGLE-3 head for a target of SHAPE, as the published Llama 3 heads
  are made (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, -LLaMA3.3-Instruct-70B): one decoder layer
  at the target's width, `fc` fusing the inputs of target layers [2, n/2, n - 3], its own
  output over a 32000-token draft vocabulary mapped to the target's by `d2t`, and the
  target's token embeddings borrowed (the 8B head) or its own (the 70B head);
- `--mtp`: the target's trunk as a `glm4moe` model (every trunk layer dense) with one MTP
  block after it, MoE whose active experts cost one dense FFN: a dense target plus one layer;
- `--block dflash` (or `dspark`): a block draft for a target of SHAPE, as z-lab's DFlash
  drafts are made (Qwen3-8B-DFlash-b16): `fc` fusing the inputs of 5 target layers spread as
  DFlash's `build_target_layer_ids` spreads them, `--block-layers` non-causal decoder layers
  (5) at the target's width with q/k norms, a block of 16, a mask token, and the target's
  token embeddings and output borrowed; DSpark adds its Markov head (rank 256) and a
  confidence projection, anchor-first.
SHAPE may also be a llama GGUF (the demo's SmolLM2): its shape and its tokenizer are taken,
so the head or MTP model serves that file.

    python bench/gpu/synthetic.py SHAPE TYPE OUT.gguf     # e.g. llama3-8b q4_k_m
    python bench/gpu/synthetic.py llama3-8b f16 head.gguf --head eagle3
    python bench/gpu/synthetic.py llama3-8b q4_k_m mtp.gguf --mtp
    python bench/gpu/synthetic.py llama3-8b f16 dflash.gguf --block dflash
    python bench/gpu/synthetic.py ~/.cache/specrun/demo/smollm2-135m-f16.gguf f16 OUT.gguf --mtp
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
V = gguf.GGUFValueType
Dims = tuple[int, ...]
Layout = list[tuple[str, Dims, Q]]
# (key, value, type, array element type): metadata copied or made as it is written
Keys = list[tuple[str, Any, V, V | None]]


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
    rope_base: float = 500000.0


LLAMA3_VOCAB = 128256
SHAPES = {  # the published configs
    "llama3-70b": Shape(8192, 80, 64, 8, 28672, LLAMA3_VOCAB, 8192),
    "llama3-8b": Shape(4096, 32, 32, 8, 14336, LLAMA3_VOCAB, 8192),
    "llama3.2-1b": Shape(2048, 16, 32, 8, 8192, LLAMA3_VOCAB, 8192, tied_output=True),
    # The CPU mode: the same code on shapes a 2-core machine runs in seconds.
    # A few hundred MB at F16, for what a 2-core machine measures in minutes (bench/block_cost.py).
    "mini-target": Shape(1024, 16, 16, 4, 2816, 32000, 4096),
    "tiny-target": Shape(256, 4, 4, 2, 768, 8192, 2048),
    "tiny-draft": Shape(
        256, 2, 4, 2, 512, 8192, 2048, tied_output=True
    ),  # K-quant rows: 256 values
}
# The published heads whose own token embeddings the head carries (the 8B head borrows them).
OWN_EMBEDDINGS = {"llama3-70b"}
DRAFT_VOCAB = 32000  # yuhuili's heads: draft_vocab_size
# The MTP block's experts: EXPERTS_USED routed and one shared, each N_FF / 4 wide.
EXPERTS, EXPERTS_USED = 8, 3
TYPES = ("q4_k_m", "q4_0", "f16")
FILE_TYPES = {
    "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
}
# Byte offset and value of each block's f16 scale(s): dequantized weights of about 0.02.
SCALES = {
    Q.Q4_0: {0: 3e-3},
    Q.Q5_0: {0: 1.5e-3},
    Q.Q8_0: {0: 2e-4},
    Q.Q4_K: {0: 1e-4, 2: 1e-4},
    Q.Q6_K: {208: 3e-5},
}
# z-lab's DFlash drafts (Qwen3-8B-DFlash-b16 and its kin): 5 target layers, 5 decoder
# layers, blocks of 16. DSpark's Markov head rank is not published for these shapes: 256.
BLOCK_TARGET_LAYERS, BLOCK_LAYERS, BLOCK_SIZE, MARKOV_RANK = 5, 5, 16, 256
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}  # llama-quant.cpp's, for rows of 32k+ values
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
    more_bits = name.removesuffix("_exps").removesuffix("_shexp") in ("attn_v", "ffn_down")
    if more_bits and layer is not None and use_more_bits(layer, n_layer):
        return Q.Q6_K
    return Q.Q4_K


def fitted(dims: Dims, kind: Q) -> Q:
    """`kind`, or llama.cpp's fallback where a row is not a whole number of its blocks."""
    if kind in FALLBACK and dims[-1] % gguf.GGML_QUANT_SIZES[kind][0]:
        return FALLBACK[kind]
    return kind


def layer_tensors(shape: Shape, i: int, file_type: str, ffn_norm: str = "ffn_norm") -> Layout:
    """A llama decoder layer; glm4moe names its FFN norm `post_attention_norm`."""
    kv = shape.n_head_kv * (shape.n_embd // shape.n_head)

    def w(name: str, rows: int, columns: int) -> tuple[str, Dims, Q]:
        return (
            f"blk.{i}.{name}.weight",
            (rows, columns),
            weight_type(name, i, shape.n_layer, file_type),
        )

    return [
        (f"blk.{i}.attn_norm.weight", (shape.n_embd,), Q.F32),
        w("attn_q", shape.n_embd, shape.n_embd),
        w("attn_k", kv, shape.n_embd),
        w("attn_v", kv, shape.n_embd),
        w("attn_output", shape.n_embd, shape.n_embd),
        (f"blk.{i}.{ffn_norm}.weight", (shape.n_embd,), Q.F32),
        w("ffn_gate", shape.n_ff, shape.n_embd),
        w("ffn_up", shape.n_ff, shape.n_embd),
        w("ffn_down", shape.n_embd, shape.n_ff),
    ]


def embeddings(shape: Shape, file_type: str) -> Layout:
    kind = weight_type("token_embd", None, 0, file_type, shape.tied_output)
    return [("token_embd.weight", (shape.n_vocab, shape.n_embd), kind)]


def output(shape: Shape, file_type: str, rows: int | None = None) -> Layout:
    out: Layout = [("output_norm.weight", (shape.n_embd,), Q.F32)]
    if not shape.tied_output:
        kind = weight_type("output", None, 0, file_type)
        out.append(("output.weight", (rows or shape.n_vocab, shape.n_embd), kind))
    return out


def tensors(shape: Shape, file_type: str) -> Layout:
    """(name, (rows, columns) or (n,), type) in llama.cpp's order."""
    out = embeddings(shape, file_type)
    for i in range(shape.n_layer):
        out += layer_tensors(shape, i, file_type)
    return out + output(shape, file_type)


def target_layers(n_layer: int) -> list[int]:
    """The layers an EAGLE-3 head reads, as llama.cpp's converter derives them."""
    return [2, n_layer // 2, n_layer - 3]


def draft_vocab(shape: Shape) -> int:
    return DRAFT_VOCAB if shape.n_vocab > DRAFT_VOCAB else shape.n_vocab // 2


def head_tensors(shape: Shape, file_type: str, own_embeddings: bool) -> Layout:
    """An EAGLE-3 head for a target of `shape` (src/models/eagle3.cpp): `fc`, one layer whose
    attention reads [token embedding, fused state] side by side, its own output over the
    draft vocabulary, and `d2t` (int64) mapping that vocabulary into the target's."""
    n, kv = shape.n_embd, shape.n_head_kv * (shape.n_embd // shape.n_head)
    head = Shape(n, 1, shape.n_head, shape.n_head_kv, shape.n_ff, shape.n_vocab, 0)

    def w(name: str, rows: int, columns: int) -> tuple[str, Dims, Q]:
        return (f"blk.0.{name}.weight", (rows, columns), weight_type(name, 0, 1, file_type))

    out: Layout = [("fc.weight", (n, 3 * n), weight_type("fc", None, 0, file_type))]
    if own_embeddings:
        out += embeddings(head, file_type)
    out += [
        ("blk.0.attn_norm.weight", (n,), Q.F32),
        ("blk.0.attn_norm_2.weight", (n,), Q.F32),
        w("attn_q", n, 2 * n),
        w("attn_k", kv, 2 * n),
        w("attn_v", kv, 2 * n),
        w("attn_output", n, n),
        ("blk.0.ffn_norm.weight", (n,), Q.F32),
        w("ffn_gate", shape.n_ff, n),
        w("ffn_up", shape.n_ff, n),
        w("ffn_down", n, shape.n_ff),
    ]
    return (
        out + output(head, file_type, draft_vocab(shape)) + [("d2t", (draft_vocab(shape),), Q.I64)]
    )


def mtp_tensors(shape: Shape, file_type: str) -> Layout:
    """`shape`'s trunk as glm4moe (src/models/glm4-moe.cpp), every layer dense, and the MTP
    block blk.N: attention, MoE with a shared expert, and the nextn projection."""
    n, i, ff = shape.n_embd, shape.n_layer, expert_width(shape)
    out = embeddings(shape, file_type)
    for layer in range(shape.n_layer):
        out += layer_tensors(shape, layer, file_type, ffn_norm="post_attention_norm")
    block = layer_tensors(shape, i, file_type, ffn_norm="post_attention_norm")[:6]

    def w(name: str, *dims: int) -> tuple[str, Dims, Q]:
        kind = weight_type(name, i, shape.n_layer + 1, file_type)
        return (f"blk.{i}.{name}.weight", dims, fitted(dims, kind))

    block += [
        (f"blk.{i}.ffn_gate_inp.weight", (EXPERTS, n), Q.F32),  # llama.cpp never quantizes it
        (f"blk.{i}.exp_probs_b.bias", (EXPERTS,), Q.F32),
        w("ffn_gate_exps", EXPERTS, ff, n),
        w("ffn_up_exps", EXPERTS, ff, n),
        w("ffn_down_exps", EXPERTS, n, ff),
        w("ffn_gate_shexp", ff, n),
        w("ffn_up_shexp", ff, n),
        w("ffn_down_shexp", n, ff),
        w("nextn.eh_proj", n, 2 * n),
        (f"blk.{i}.nextn.enorm.weight", (n,), Q.F32),
        (f"blk.{i}.nextn.hnorm.weight", (n,), Q.F32),
    ]
    return out + block + output(shape, file_type)


def block_target_layers(n_layer: int, count: int = BLOCK_TARGET_LAYERS) -> list[int]:
    """The target layers a DFlash draft reads, as DFlash's `build_target_layer_ids` spreads
    them: from layer 1 to n - 3 in equal steps (Qwen3-8B's 36 layers: 1, 9, 17, 25, 33)."""
    start, end = 1, n_layer - 3
    return [round(start + i * (end - start) / (count - 1)) for i in range(count)]


def block_tensors(shape: Shape, file_type: str, layers: int, dspark: bool = False) -> Layout:
    """A DFlash draft for a target of `shape` (src/models/dflash.cpp): `fc` over the target
    layers' inputs side by side, its norm, `layers` decoder layers with q/k norms, the final
    norm; no token embeddings or output (the target's are borrowed). DSpark adds the Markov
    head (markov_w1 over the vocabulary, markov_w2 over the draft's) and the confidence head."""
    n, head_dim = shape.n_embd, shape.n_embd // shape.n_head
    out: Layout = [
        ("fc.weight", (n, BLOCK_TARGET_LAYERS * n), weight_type("fc", None, 0, file_type)),
        ("enc.output_norm.weight", (n,), Q.F32),
    ]
    for i in range(layers):
        layer = layer_tensors(shape, i, file_type)
        out += layer[:5] + [
            (f"blk.{i}.attn_q_norm.weight", (head_dim,), Q.F32),
            (f"blk.{i}.attn_k_norm.weight", (head_dim,), Q.F32),
        ]
        out += layer[5:]
    out.append(("output_norm.weight", (n,), Q.F32))
    if dspark:
        out += [
            ("markov_w1.weight", (shape.n_vocab, MARKOV_RANK), Q.F16),
            ("markov_w2.weight", (shape.n_vocab, MARKOV_RANK), Q.F16),
            ("conf_proj.weight", (1, n + MARKOV_RANK), Q.F32),
            ("conf_proj.bias", (1,), Q.F32),
        ]
    return out


def expert_width(shape: Shape) -> int:
    """Each expert's FFN width: the routed and the shared one together as wide as the trunk's."""
    return shape.n_ff // (EXPERTS_USED + 1)


def storage_shape(dims: Dims, kind: Q) -> tuple[Dims, np.dtype]:
    """How a tensor is stored: values for F32/F16/I64, rows of block bytes for quantized types."""
    values = {Q.F32: np.float32, Q.F16: np.float16, Q.I64: np.int64}
    if kind in values:
        return dims, np.dtype(values[kind])
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    return (*dims[:-1], dims[-1] // block_values * block_bytes), np.dtype(np.uint8)


def layout_bytes(layout: Layout) -> int:
    total = 0
    for _, dims, kind in layout:
        stored, dtype = storage_shape(dims, kind)
        total += int(np.prod(stored)) * dtype.itemsize
    return total


def data_bytes(shape: Shape, file_type: str) -> int:
    """The tensor data of the file: within a few MB (metadata, padding) of its size."""
    return layout_bytes(tensors(shape, file_type))


def block_pool(kind: Q, rng: np.random.Generator) -> np.ndarray:
    """POOL_BLOCKS valid blocks of `kind` as raw bytes, or values for F16/F32."""
    if kind in (Q.F16, Q.F32):
        return (rng.standard_normal(POOL_BLOCKS * 32) * 0.02).astype(storage_shape((), kind)[1])
    _, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    pool = rng.integers(0, 256, size=(POOL_BLOCKS, block_bytes), dtype=np.uint8)
    for offset, scale in SCALES[kind].items():
        scales = (rng.uniform(0.5, 1.5, POOL_BLOCKS) * scale).astype(np.float16)
        pool[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return pool


def tensor_data(
    name: str, dims: Dims, kind: Q, pools: dict[Q, np.ndarray], n_vocab: int
) -> np.ndarray:
    if kind == Q.I64:  # d2t: draft ids spread over the target's vocabulary
        return np.arange(dims[0], dtype=np.int64) * (n_vocab // dims[0])
    if len(dims) == 1:
        return np.ones(dims, dtype=np.float32)  # the norms (and the experts' equal biases)
    stored, _ = storage_shape(dims, kind)
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


def synthetic_tokenizer(n_vocab: int) -> Keys:
    tokens, scores, types = vocabulary(n_vocab)
    return [
        ("tokenizer.ggml.model", "llama", V.STRING, None),
        ("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING),
        ("tokenizer.ggml.scores", scores, V.ARRAY, V.FLOAT32),
        ("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32),
        ("tokenizer.ggml.bos_token_id", 1, V.UINT32, None),
        ("tokenizer.ggml.eos_token_id", 2, V.UINT32, None),
        ("tokenizer.ggml.unknown_token_id", 0, V.UINT32, None),
        ("tokenizer.ggml.add_bos_token", True, V.BOOL, None),
    ]


def like(path: Path) -> tuple[Shape, Keys]:
    """The shape of a llama GGUF and its tokenizer keys, so a model written with them serves
    that file (the same vocabulary, token by token)."""
    reader = gguf.GGUFReader(path)

    def value(key: str) -> Any:  # noqa: ANN401 - a GGUF value of any type
        return reader.fields[key].contents()

    arch = value("general.architecture")
    names = {t.name for t in reader.tensors}
    tokenizer = [
        (key, field.contents(), field.types[0], field.types[-1] if len(field.types) > 1 else None)
        for key, field in reader.fields.items()
        if key.startswith("tokenizer.")
    ]
    shape = Shape(
        n_embd=value(f"{arch}.embedding_length"),
        n_layer=value(f"{arch}.block_count"),
        n_head=value(f"{arch}.attention.head_count"),
        n_head_kv=value(f"{arch}.attention.head_count_kv"),
        n_ff=value(f"{arch}.feed_forward_length"),
        n_vocab=len(value("tokenizer.ggml.tokens")),
        n_ctx_train=value(f"{arch}.context_length"),
        tied_output="output.weight" not in names,
        rope_base=value(f"{arch}.rope.freq_base")
        if f"{arch}.rope.freq_base" in reader.fields
        else 500000.0,
    )
    return shape, tokenizer


def common_keys(writer: gguf.GGUFWriter, shape: Shape, n_layer: int, file_type: str) -> None:
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.n_embd // shape.n_head)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(FILE_TYPES[file_type])


def write_gguf(
    path: Path,
    arch: str,
    layout: Layout,
    keys: Callable[[gguf.GGUFWriter], None],
    tokenizer: Keys,
    seed: int = 0,
) -> Path:
    """Write `layout` with random blocks, `keys` and `tokenizer` to `path` (through a
    temporary name, so a partial file never looks finished)."""
    rng = np.random.default_rng(seed)
    n_vocab = next(len(v) for k, v, *_ in tokenizer if k == "tokenizer.ggml.tokens")
    kinds = {kind for *_, kind in layout} - {Q.I64}
    pools = {kind: block_pool(kind, rng) for kind in kinds}
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), arch)
    writer.add_name(f"synthetic {path.stem}")
    keys(writer)
    for key, value, kind, element in tokenizer:
        writer.add_key_value(key, value, kind, element)
    for name, dims, kind in layout:
        stored, dtype = storage_shape(dims, kind)
        writer.add_tensor_info(
            name,
            stored,
            dtype,
            int(np.prod(stored)) * dtype.itemsize,
            raw_dtype=None if kind in (Q.F32, Q.F16, Q.I64) else kind,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, dims, kind in layout:
        writer.write_tensor_data(tensor_data(name, dims, kind, pools, n_vocab))
    writer.close()
    partial.replace(path)
    return path


def write_model(
    path: Path, shape: Shape, file_type: str, seed: int = 0, tokenizer: Keys | None = None
) -> Path:
    """A llama target or draft of `shape` at `file_type`."""
    return write_gguf(
        path,
        "llama",
        tensors(shape, file_type),
        lambda writer: common_keys(writer, shape, shape.n_layer, file_type),
        tokenizer or synthetic_tokenizer(shape.n_vocab),
        seed,
    )


def write_eagle3_head(
    path: Path,
    shape: Shape,
    file_type: str,
    own_embeddings: bool = False,
    seed: int = 0,
    tokenizer: Keys | None = None,
) -> Path:
    """An EAGLE-3 head for a target of `shape` (see head_tensors)."""

    def keys(writer: gguf.GGUFWriter) -> None:
        # The installed gguf package predates the eagle3 architecture: its keys by name.
        writer.add_array("eagle3.target_layers", target_layers(shape.n_layer))
        writer.add_uint32("eagle3.target_hidden_size", shape.n_embd)
        common_keys(writer, shape, 1, file_type)

    layout = head_tensors(shape, file_type, own_embeddings)
    return write_gguf(
        path, "eagle3", layout, keys, tokenizer or synthetic_tokenizer(shape.n_vocab), seed
    )


def write_mtp_model(
    path: Path, shape: Shape, file_type: str, seed: int = 0, tokenizer: Keys | None = None
) -> Path:
    """`shape` as a glm4moe target with one MTP block (see mtp_tensors)."""

    def keys(writer: gguf.GGUFWriter) -> None:
        common_keys(writer, shape, shape.n_layer + 1, file_type)
        writer.add_nextn_predict_layers(1)
        writer.add_leading_dense_block_count(shape.n_layer)
        writer.add_expert_feed_forward_length(expert_width(shape))
        writer.add_expert_count(EXPERTS)
        writer.add_expert_used_count(EXPERTS_USED)
        writer.add_expert_shared_count(1)
        writer.add_expert_weights_scale(1.0)
        writer.add_expert_weights_norm(True)
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)

    layout = mtp_tensors(shape, file_type)
    return write_gguf(
        path, "glm4moe", layout, keys, tokenizer or synthetic_tokenizer(shape.n_vocab), seed
    )


def write_block_draft(
    path: Path,
    shape: Shape,
    file_type: str,
    layers: int = BLOCK_LAYERS,
    dspark: bool = False,
    seed: int = 0,
    tokenizer: Keys | None = None,
) -> Path:
    """A DFlash (or DSpark) draft for a target of `shape` (see block_tensors); its mask token
    is the vocabulary's last id, a spare one as in the published drafts."""
    tokenizer = tokenizer or synthetic_tokenizer(shape.n_vocab)
    n_vocab = next(len(v) for k, v, *_ in tokenizer if k == "tokenizer.ggml.tokens")
    mask = [("tokenizer.ggml.mask_token_id", n_vocab - 1, V.UINT32, None)]

    def keys(writer: gguf.GGUFWriter) -> None:
        writer.add_array("dflash.target_layers", block_target_layers(shape.n_layer))
        writer.add_uint32("dflash.block_size", BLOCK_SIZE)
        if dspark:
            writer.add_bool("dflash.sample_from_anchor", True)
            writer.add_bool("dflash.has_confidence_head", True)
        common_keys(writer, shape, layers, file_type)

    layout = block_tensors(shape, file_type, layers, dspark)
    tokens = [key for key in tokenizer if key[0] != mask[0][0]] + mask
    return write_gguf(path, "dflash", layout, keys, tokens, seed)


def write(
    out: Path,
    shape: str,
    file_type: str,
    head: str | None = None,
    mtp: bool = False,
    block: str | None = None,
    block_layers: int = BLOCK_LAYERS,
) -> Path:
    """What the command line asks for: SHAPE is a name in SHAPES or a llama GGUF."""
    if shape in SHAPES:
        dims, tokenizer = SHAPES[shape], None
    else:
        dims, tokenizer = like(Path(shape).expanduser())
    if block is not None:
        return write_block_draft(
            out, dims, file_type, block_layers, block == "dspark", tokenizer=tokenizer
        )
    if head == "eagle3":
        own = shape in OWN_EMBEDDINGS
        return write_eagle3_head(out, dims, file_type, own, tokenizer=tokenizer)
    if mtp:
        return write_mtp_model(out, dims, file_type, tokenizer=tokenizer)
    return write_model(out, dims, file_type, tokenizer=tokenizer)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "shape", metavar="SHAPE", help=f"{', '.join(SHAPES)}, or a llama GGUF to take after"
    )
    parser.add_argument(
        "type", choices=TYPES, metavar="TYPE", help=f"{', '.join(TYPES)}: llama.cpp's mixes"
    )
    parser.add_argument("out", type=Path, metavar="OUT.gguf", help="the file to write")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--head", choices=["eagle3"], help="an EAGLE-3 head for a target of SHAPE")
    what.add_argument(
        "--mtp", action="store_true", help="SHAPE as a glm4moe target with one MTP block"
    )
    what.add_argument(
        "--block", choices=["dflash", "dspark"], help="a block draft for a target of SHAPE"
    )
    parser.add_argument(
        "--block-layers",
        type=int,
        default=BLOCK_LAYERS,
        help=f"the block draft's decoder layers ({BLOCK_LAYERS})",
    )
    args = parser.parse_args()
    if args.shape not in SHAPES and not Path(args.shape).expanduser().is_file():
        parser.error(f"SHAPE: {args.shape} is neither a shape ({', '.join(SHAPES)}) nor a file")
    if args.block_layers < 1:
        parser.error("--block-layers: at least 1")
    out = write(args.out, args.shape, args.type, args.head, args.mtp, args.block, args.block_layers)
    print(f"{out}: {out.stat().st_size / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
