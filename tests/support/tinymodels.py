"""Tiny GGUF models for tests, written with the `gguf` package.

A two-layer llama with random weights and a small SentencePiece-style vocabulary
(control tokens, the 256 byte tokens, a few word pieces), so any text tokenizes
(byte fallback) and real llama.cpp code runs on it in milliseconds. Output weights
are large, so logits are peaky and argmax ties, which batch numerics could flip,
are rare.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = [
    "the",
    "a",
    "sea",
    "cat",
    "dog",
    "is",
    "and",
    "of",
    "to",
    "in",
    "blue",
    "red",
    "big",
    "small",
    "day",
    "night",
    "sun",
    "moon",
    "tree",
    "road",
    "hello",
    "world",
    "code",
    "edit",
    "line",
]

N_EMBD, N_HEAD, N_LAYER, N_FF, N_CTX = 64, 4, 2, 128, 1024


def vocabulary(extra: int = 0, variant: str = "") -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types. `extra` padding tokens at the end; `variant` renames the
    word pieces (an incompatible vocabulary of the same size)."""
    T = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [T.UNKNOWN, T.CONTROL, T.CONTROL, T.CONTROL, T.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [T.BYTE] * 256
    pieces = (
        ["▁"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [f"▁{w}{variant}" for w in WORDS]
    )
    pieces += [w + variant for w in WORDS] + ["\n", ".", ",", "▁I", "I"]
    pieces = list(dict.fromkeys(pieces))  # "a" is both a letter and a word
    tokens += pieces
    types += [T.NORMAL] * len(pieces)
    tokens += [f"<pad{i}>" for i in range(extra)]
    types += [T.UNUSED] * extra
    # Longer pieces score higher, so the SPM merges prefer whole words.
    scores = [0.0] * 261 + [float(len(p)) for p in pieces] + [-1000.0] * extra
    return tokens, scores, [int(t) for t in types]


def random_weights(n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape: int, std: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    tensors = {
        "token_embd.weight": w(n_vocab, N_EMBD, std=1.0),
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": w(n_vocab, N_EMBD, std=1.0),
    }
    for i in range(N_LAYER):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.attn_q.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.attn_k.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.attn_v.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.attn_output.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": w(N_FF, N_EMBD),
            f"blk.{i}.ffn_up.weight": w(N_FF, N_EMBD),
            f"blk.{i}.ffn_down.weight": w(N_EMBD, N_FF),
        }
    return tensors


def write_tiny_model(
    path: Path,
    *,
    seed: int = 0,
    noise: float = 0.0,
    noise_seed: int = 1,
    extra_vocab: int = 0,
    variant: str = "",
    eos_id: int = 2,
    add_bos: bool = True,
    chat_template: str | None = CHATML_TEMPLATE,
    duplicate_token: bool = False,
) -> Path:
    """Write a tiny llama GGUF. Models with the same `seed` share weights; `noise` perturbs
    them (a draft that mostly agrees with its target). `duplicate_token` gives two ids the
    same text, which trips an assertion inside llama.cpp's tokenizer (a native abort)."""
    tokens, scores, types = vocabulary(extra_vocab, variant)
    if duplicate_token:
        tokens[-1] = tokens[-2]
    base = random_weights(len(tokens) - extra_vocab, seed)
    rng = np.random.default_rng(noise_seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(eos_id)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    if chat_template:
        writer.add_chat_template(chat_template)
    for name, tensor in base.items():
        if noise:
            tensor = tensor + (rng.standard_normal(tensor.shape) * noise * tensor.std()).astype(
                np.float32
            )
        if extra_vocab and name in ("token_embd.weight", "output.weight"):
            tensor = np.concatenate([tensor, np.zeros((extra_vocab, N_EMBD), dtype=np.float32)])
        writer.add_tensor(name, np.ascontiguousarray(tensor, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
