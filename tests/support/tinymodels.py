"""Tiny GGUF models for tests, written with the `gguf` package.

A two-layer llama with random weights and a small SentencePiece-style vocabulary
(control tokens, the 256 byte tokens, a few word pieces), so any text tokenizes
(byte fallback) and real llama.cpp code runs on it in milliseconds. Output weights
are large, so logits are peaky and argmax ties, which batch numerics could flip,
are rare. Draft heads (EAGLE-3) and an MTP target (glm4moe with a NextN block) share
the same vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
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
# Qwen2.5-Coder's fill-in-the-middle tokens (prefix, suffix, middle, pad, repository, file),
# as `specials`: llama.cpp finds each by its text, as it does in Qwen's GGUFs.
FIM_TOKENS = (
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)


def vocabulary(
    extra: int = 0, variant: str = "", specials: tuple[str, ...] = ()
) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types. `extra` padding tokens at the end; `variant` renames the
    word pieces (an incompatible vocabulary of the same size); `specials`, a real model's
    added tokens after the word pieces (`special_type`)."""
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
    added = [token for token in specials if token not in tokens]
    tokens += added
    types += [special_type(token) for token in added]
    tokens += [f"<pad{i}>" for i in range(extra)]
    types += [T.UNUSED] * extra
    # Longer pieces score higher, so the SPM merges prefer whole words.
    scores = [0.0] * 261 + [float(len(p)) for p in pieces] + [0.0] * len(added) + [-1000.0] * extra
    return tokens, scores, [int(t) for t in types]


def special_type(token: str) -> gguf.TokenType:
    """An added token's type as llama.cpp's converter writes it: CONTROL where it looks
    special (`<|...|>`, DeepSeek's `<｜...｜>`, or a BOS-like `[...]`/`<sop>`), else
    USER_DEFINED (Qwen3's and DeepSeek-R1's `<think>` and `<tool_call>`, which their
    tokenizers do not mark special). Both tokenize as one token each."""
    looks_special = (
        (token.startswith("<|") and token.endswith("|>"))
        or (token.startswith("<｜") and token.endswith("｜>"))
        or (token.startswith("[") and token.endswith("]"))
        or token == "<sop>"
    )
    return gguf.TokenType.CONTROL if looks_special else gguf.TokenType.USER_DEFINED


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
    specials: tuple[str, ...] = (),
    bos_id: int = 1,
    pooling: int | None = None,
) -> Path:
    """Write a tiny llama GGUF. Models with the same `seed` share weights; `noise` perturbs
    them (a draft that mostly agrees with its target). `duplicate_token` gives two ids the
    same text, which trips an assertion inside llama.cpp's tokenizer (a native abort).
    `pooling` writes `llama.pooling_type` (llama.cpp's numbers: 1 mean, 2 cls, 3 last, 4
    rank), which makes it an embedding model."""
    tokens, scores, types = vocabulary(extra_vocab, variant, specials)
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
    add_tokenizer(writer, tokens, scores, types, eos_id, add_bos, chat_template, bos_id)
    if pooling is not None:
        writer.add_pooling_type(gguf.PoolingType(pooling))
    for name, tensor in base.items():
        if noise:
            tensor = tensor + (rng.standard_normal(tensor.shape) * noise * tensor.std()).astype(
                np.float32
            )
        if extra_vocab and name in ("token_embd.weight", "output.weight"):
            tensor = np.concatenate([tensor, np.zeros((extra_vocab, N_EMBD), dtype=np.float32)])
        writer.add_tensor(name, np.ascontiguousarray(tensor, dtype=np.float32))
    return finish(writer, path)


TEMPLATES = Path(__file__).parent / "templates"  # real chat templates: SOURCES.md


@dataclass(frozen=True)
class TemplateModel:
    """A real model's chat template and the added tokens it and its model's answers use."""

    file: str  # in TEMPLATES
    eos: str  # the model's EOS text
    bos: str | None = None  # its BOS text; None: the tiny vocabulary's `<s>`
    add_bos: bool = False
    specials: tuple[str, ...] = ()  # the other added tokens


_THINK = ("<think>", "</think>")
_QWEN = (
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    *_THINK,
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
_DEEPSEEK = (
    "<｜User｜>",
    "<｜Assistant｜>",
    *_THINK,
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
)
TEMPLATE_MODELS = {
    "qwen3": TemplateModel("Qwen-Qwen3-0.6B.jinja", "<|im_end|>", specials=_QWEN),
    "qwen3-coder": TemplateModel("Qwen3-Coder.jinja", "<|im_end|>", specials=_QWEN),
    "glm-4.5": TemplateModel(
        "GLM-4.6.jinja",
        "<|endoftext|>",
        specials=(
            "[gMASK]",
            "<sop>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|observation|>",
            *_THINK,
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "<tool_response>",
            "</tool_response>",
        ),
    ),
    "gpt-oss": TemplateModel(
        "openai-gpt-oss-120b.jinja",
        "<|return|>",
        bos="<|startoftext|>",
        specials=(
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|channel|>",
            "<|constrain|>",
            "<|call|>",
            "<|endoftext|>",
        ),
    ),
    "deepseek-r1": TemplateModel(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "<｜end▁of▁sentence｜>",
        bos="<｜begin▁of▁sentence｜>",
        add_bos=True,
        specials=_DEEPSEEK,
    ),
    "deepseek-v3.1": TemplateModel(
        "deepseek-ai-DeepSeek-V3.1.jinja",
        "<｜end▁of▁sentence｜>",
        bos="<｜begin▁of▁sentence｜>",
        add_bos=True,
        specials=_DEEPSEEK,
    ),
    "kimi-k2": TemplateModel(
        "moonshotai-Kimi-K2.jinja",
        "[EOS]",
        bos="[BOS]",
        specials=(
            "<|im_system|>",
            "<|im_user|>",
            "<|im_assistant|>",
            "<|im_middle|>",
            "<|im_end|>",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
            "<|media_start|>",
            "<|media_content|>",
            "<|media_pad|>",
            "<|media_end|>",
        ),
    ),
    "llama-3.1": TemplateModel(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "<|eot_id|>",
        bos="<|begin_of_text|>",
        add_bos=True,
        specials=(
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
            "<|end_of_text|>",
        ),
    ),
}


def write_template_model(path: Path, name: str, *, seed: int = 0, noise: float = 0.0) -> Path:
    """Write a tiny llama GGUF carrying the real chat template `name` (a TEMPLATE_MODELS key)
    and its model's BOS, EOS and added tokens, each one token as in the real model. Models of
    the same `name` and `seed` share weights; `noise` perturbs them (a draft for it)."""
    model = TEMPLATE_MODELS[name]
    specials = tuple(t for t in (model.bos, model.eos) if t) + model.specials
    tokens = vocabulary(specials=specials)[0]
    return write_tiny_model(
        path,
        seed=seed,
        noise=noise,
        chat_template=(TEMPLATES / model.file).read_text(encoding="utf-8"),
        specials=specials,
        bos_id=tokens.index(model.bos) if model.bos else 1,
        eos_id=tokens.index(model.eos),
        add_bos=model.add_bos,
    )


def add_tokenizer(
    writer: gguf.GGUFWriter,
    tokens: list[str],
    scores: list[float],
    types: list[int],
    eos_id: int = 2,
    add_bos: bool = True,
    chat_template: str | None = CHATML_TEMPLATE,
    bos_id: int = 1,
) -> None:
    """The F32 file type and the tokenizer keys every tiny model carries."""
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(bos_id)
    writer.add_eos_token_id(eos_id)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    if chat_template:
        writer.add_chat_template(chat_template)


def finish_head_or_target(
    writer: gguf.GGUFWriter,
    path: Path,
    n_embd: int,
    vocab: tuple[list[str], list[float], list[int]],
    tensors: dict[str, np.ndarray],
) -> Path:
    """The attention keys, the tokenizer and the F32 tensors the heads' writers share."""
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(n_embd // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    add_tokenizer(writer, *vocab)
    for name, tensor in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(tensor, dtype=np.float32))
    return finish(writer, path)


def finish(writer: gguf.GGUFWriter, path: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_eagle3_head(
    path: Path,
    *,
    seed: int = 0,
    target_layers: tuple[int, int, int] = (0, 1, 1),
    target_hidden: int = N_EMBD,
    n_embd: int | None = None,
    own_embeddings: bool = True,
    vocab_size: int | None = None,
    variant: str = "",
) -> Path:
    """Write a tiny EAGLE-3 draft head (arch `eagle3`) for the tiny target: `fc` fuses the
    target's hidden states at `target_layers` (3 rows of `target_hidden`) into `n_embd`, one
    decoder layer whose attention reads [token embedding, fused state] (2 * n_embd). Without
    `own_embeddings` it has no token_embd / output and borrows the target's through the
    context's ctx_other, so n_embd must be the target's. `vocab_size` pads the head's
    vocabulary with unused tokens (a head made for another target); `target_layers` and
    `target_hidden` likewise let a test write a head that does not fit its target, and
    `variant` renames its word pieces (another tokenizer of the same size)."""
    if n_embd is None:
        n_embd = N_EMBD // 2 if own_embeddings else target_hidden
    assert own_embeddings or n_embd == target_hidden, "a borrowing head has the target's width"
    assert len(target_layers) == 3, "eagle3 reads exactly three target layers"
    n_base = len(vocabulary(0, variant)[0])
    vocab_size = n_base if vocab_size is None else vocab_size
    assert vocab_size >= n_base, "vocab_size pads the tiny vocabulary, it cannot shrink it"
    tokens, scores, types = vocabulary(vocab_size - n_base, variant)
    n_ff = 2 * n_embd
    rng = np.random.default_rng(seed)

    def w(*shape: int, std: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    tensors = {
        "fc.weight": w(n_embd, 3 * target_hidden),
        "output_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_norm_2.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.attn_q.weight": w(n_embd, 2 * n_embd),
        "blk.0.attn_k.weight": w(n_embd, 2 * n_embd),
        "blk.0.attn_v.weight": w(n_embd, 2 * n_embd),
        "blk.0.attn_output.weight": w(n_embd, n_embd),
        "blk.0.ffn_norm.weight": np.ones(n_embd, dtype=np.float32),
        "blk.0.ffn_gate.weight": w(n_ff, n_embd),
        "blk.0.ffn_up.weight": w(n_ff, n_embd),
        "blk.0.ffn_down.weight": w(n_embd, n_ff),
    }
    if own_embeddings:
        tensors["token_embd.weight"] = w(vocab_size, n_embd, std=1.0)
        tensors["output.weight"] = w(vocab_size, n_embd, std=1.0)
    arch = "eagle3"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(path.stem)
    writer.add_array(f"{arch}.target_layers", [int(i) for i in target_layers])
    writer.add_uint32(f"{arch}.target_hidden_size", target_hidden)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(1)
    writer.add_feed_forward_length(n_ff)
    return finish_head_or_target(writer, path, n_embd, (tokens, scores, types), tensors)


MTP_EXPERTS, MTP_EXPERTS_USED, MTP_FF_EXP = 4, 2, 32


def write_tiny_mtp_model(path: Path, *, seed: int = 0, with_mtp: bool = True) -> Path:
    """Write a tiny `glm4moe` target with the tiny tokenizer: N_LAYER dense trunk layers
    (leading_dense_block_count covers them all) and, `with_mtp`, one NextN/MTP block after
    them (blk.N_LAYER: MoE with a shared expert, plus nextn.eh_proj / enorm / hnorm), which
    llama.cpp loads only with load_mtp and runs in an LLAMA_CONTEXT_TYPE_MTP context."""
    tokens, scores, types = vocabulary()
    tensors = {
        name.replace("ffn_norm", "post_attention_norm"): tensor
        for name, tensor in random_weights(len(tokens), seed).items()
    }
    rng = np.random.default_rng([seed, 1])

    def w(*shape: int, std: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    if with_mtp:
        i, ones = N_LAYER, np.ones(N_EMBD, dtype=np.float32)
        tensors |= {
            f"blk.{i}.attn_norm.weight": ones,
            f"blk.{i}.attn_q.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.attn_k.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.attn_v.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.attn_output.weight": w(N_EMBD, N_EMBD),
            f"blk.{i}.post_attention_norm.weight": ones,
            f"blk.{i}.ffn_gate_inp.weight": w(MTP_EXPERTS, N_EMBD),
            f"blk.{i}.exp_probs_b.bias": np.zeros(MTP_EXPERTS, dtype=np.float32),
            f"blk.{i}.ffn_gate_exps.weight": w(MTP_EXPERTS, MTP_FF_EXP, N_EMBD),
            f"blk.{i}.ffn_up_exps.weight": w(MTP_EXPERTS, MTP_FF_EXP, N_EMBD),
            f"blk.{i}.ffn_down_exps.weight": w(MTP_EXPERTS, N_EMBD, MTP_FF_EXP),
            f"blk.{i}.ffn_gate_shexp.weight": w(MTP_FF_EXP, N_EMBD),
            f"blk.{i}.ffn_up_shexp.weight": w(MTP_FF_EXP, N_EMBD),
            f"blk.{i}.ffn_down_shexp.weight": w(N_EMBD, MTP_FF_EXP),
            f"blk.{i}.nextn.eh_proj.weight": w(N_EMBD, 2 * N_EMBD),
            f"blk.{i}.nextn.enorm.weight": ones,
            f"blk.{i}.nextn.hnorm.weight": ones,
        }
    writer = gguf.GGUFWriter(str(path), "glm4moe")
    writer.add_name(path.stem)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER + 1 if with_mtp else N_LAYER)
    if with_mtp:
        writer.add_nextn_predict_layers(1)
    writer.add_leading_dense_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_expert_feed_forward_length(MTP_FF_EXP)
    writer.add_expert_count(MTP_EXPERTS)
    writer.add_expert_used_count(MTP_EXPERTS_USED)
    writer.add_expert_shared_count(1)
    writer.add_expert_weights_scale(1.0)
    writer.add_expert_weights_norm(True)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    return finish_head_or_target(writer, path, N_EMBD, (tokens, scores, types), tensors)


MASK_ID = 0  # the tiny vocabulary's <unk> stands for the mask: real drafts reuse a spare id


def write_tiny_block_draft(
    path: Path,
    *,
    seed: int = 0,
    block_size: int = 8,
    target_layers: tuple[int, ...] = (0, 1),
    n_embd: int = N_EMBD,
    dspark: bool = False,
    anchor_first: bool = True,
    own_embeddings: bool = False,
    mask: bool = True,
    variant: str = "",
    made_for: tuple[str, str, int] | None = None,
    guessing: bool = False,
) -> Path:
    """Write a tiny DFlash draft (arch `dflash`) for the tiny target: `fc` fuses the target's
    layer inputs at `target_layers` (each N_EMBD wide) into n_embd, one non-causal decoder
    layer (with the q/k norms DFlash's graph needs) over the noise block, the target's token
    embeddings and output borrowed through ctx_other unless `own_embeddings`. `dspark` adds a
    Markov head (markov_w1/w2, a confidence projection) and writes `anchor_first` as
    `dflash.sample_from_anchor`. `n_embd`, `target_layers`, `variant` and `made_for` (the
    target's name, architecture and layer count, as specrun records them) let a test write a
    draft that does not fit its target; without `mask` the vocabulary names no mask token.

    Random weights guess nothing at the mask rows. A `guessing` draft (for the tiny target of
    the same `seed`) guesses at every row what the target says after the anchor: its own copy
    of the target's embeddings (the mask's row zero, so the masks' queries are zero and every
    row attends to the block's rows alike, and `fc` zero, so the cache's keys and values are
    too) and output, identity value and output projections, no FFN: each row's state is the
    anchor's embedding, and its logits those of the target's output layer over it."""
    tokens, scores, types = vocabulary(0, variant)
    n_vocab, n_ff, rank = len(tokens), 2 * n_embd, 8
    head_dim = n_embd // N_HEAD
    rng = np.random.default_rng([seed, 50])

    def w(*shape: int, std: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    ones = np.ones(n_embd, dtype=np.float32)
    tensors = {
        "fc.weight": w(n_embd, len(target_layers) * n_embd),
        "enc.output_norm.weight": ones,
        "output_norm.weight": ones,
        "blk.0.attn_norm.weight": ones,
        "blk.0.attn_q.weight": w(n_embd, n_embd),
        "blk.0.attn_k.weight": w(n_embd, n_embd),
        "blk.0.attn_v.weight": w(n_embd, n_embd),
        "blk.0.attn_output.weight": w(n_embd, n_embd),
        "blk.0.attn_q_norm.weight": np.ones(head_dim, dtype=np.float32),
        "blk.0.attn_k_norm.weight": np.ones(head_dim, dtype=np.float32),
        "blk.0.ffn_norm.weight": ones,
        "blk.0.ffn_gate.weight": w(n_ff, n_embd),
        "blk.0.ffn_up.weight": w(n_ff, n_embd),
        "blk.0.ffn_down.weight": w(n_embd, n_ff),
    }
    if own_embeddings:
        tensors["token_embd.weight"] = w(n_vocab, n_embd, std=1.0)
        tensors["output.weight"] = w(n_vocab, n_embd, std=1.0)
    if guessing:
        assert n_embd == N_EMBD and not variant, "a guessing draft has its target's shape"
        target = random_weights(n_vocab, seed)
        embeddings = target["token_embd.weight"].copy()
        embeddings[MASK_ID] = 0.0
        identity = np.eye(n_embd, dtype=np.float32)
        tensors |= {
            "token_embd.weight": embeddings,
            "output.weight": target["output.weight"],
            "fc.weight": np.zeros_like(tensors["fc.weight"]),
            "blk.0.attn_v.weight": identity,
            "blk.0.attn_output.weight": identity,
            "blk.0.ffn_down.weight": np.zeros_like(tensors["blk.0.ffn_down.weight"]),
        }
    if dspark:
        tensors["markov_w1.weight"] = w(n_vocab, rank, std=0.5)
        tensors["markov_w2.weight"] = w(n_vocab, rank, std=0.5)
        tensors["conf_proj.weight"] = w(1, n_embd + rank)
        tensors["conf_proj.bias"] = np.zeros(1, dtype=np.float32)
    arch = "dflash"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(path.stem)
    writer.add_array(f"{arch}.target_layers", [int(i) for i in target_layers])
    writer.add_uint32(f"{arch}.block_size", block_size)
    if dspark:
        writer.add_bool(f"{arch}.sample_from_anchor", anchor_first)
        writer.add_bool(f"{arch}.has_confidence_head", True)
    if made_for is not None:
        name, architecture, layers = made_for
        writer.add_string(f"specrun.{arch}.target.name", name)
        writer.add_string(f"specrun.{arch}.target.architecture", architecture)
        writer.add_uint32(f"specrun.{arch}.target.block_count", layers)
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(1)
    writer.add_feed_forward_length(n_ff)
    if mask:
        writer.add_mask_token_id(MASK_ID)
    return finish_head_or_target(writer, path, n_embd, (tokens, scores, types), tensors)
