"""Test helpers: a Hugging Face cache laid out exactly as huggingface_hub writes it, and tiny GGUFs.

    <cache>/models--org--name/blobs/<sha256>               the file's bytes
    <cache>/models--org--name/refs/main                    the commit hash, no newline
    <cache>/models--org--name/snapshots/<commit>/<file>    -> ../../blobs/<sha256>

Downloads themselves are tested against a Hub on loopback (hubserver.py, test_downloads.py).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import gguf
import numpy as np
import pytest

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def repo_dir(cache: Path, repo: str) -> Path:
    return cache / f"models--{repo.replace('/', '--')}"


def _start_repo(cache: Path, repo: str) -> Path:
    folder = repo_dir(cache, repo)
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(COMMIT)
    (folder / "snapshots" / COMMIT).mkdir(parents=True, exist_ok=True)
    return folder


def add_cached_file(cache: Path, repo: str, name: str, content: bytes | None = None) -> Path:
    """Put `name` of `repo` in the cache as a completed download; returns the snapshot path."""
    content = content if content is not None else f"not a model: {repo}/{name}".encode()
    folder = _start_repo(cache, repo)
    blob = folder / "blobs" / hashlib.sha256(content).hexdigest()
    blob.write_bytes(content)
    link = folder / "snapshots" / COMMIT / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def write_tiny_gguf(
    path: Path,
    *,
    architecture: str = "llama",
    layers: int = 2,
    context: int = 256,
    tokens: tuple[str, ...] = ("<s>", "</s>", "a", "b"),
    chat_template: str | None = "{{ messages }}",
    file_type: int = gguf.LlamaFileType.MOSTLY_F16,
) -> bytes:
    """A small but real GGUF: header, a few metadata keys and one tensor. Returns its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny test model")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_file_type(file_type)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(list(tokens))
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    writer.add_tensor("token_embd.weight", np.ones((len(tokens), 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


LLAMA_1B = "bartowski/Llama-3.2-1B-Instruct-GGUF"
QWEN_14B = "Qwen/Qwen2.5-14B-Instruct-GGUF"
QWEN_14B_PARTS = [f"qwen2.5-14b-instruct-q4_k_m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def use_temporary_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty, offline Hugging Face cache; no user catalog; specrun's cache in tmp too."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECRUN_CACHE", str(tmp_path / "specrun"))
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    return cache


# --- EAGLE-3 checkpoints, and llama.cpp's converter stood in for --------------------------

HEAD_REPO = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"  # the catalog's llama-8b-eagle3
HEAD_TARGET_REPO = "unsloth/Llama-3.1-8B-Instruct"


def fake_checkpoint() -> tuple[dict[str, bytes], dict[str, bytes]]:
    """A head's and a target's files as the Hub lists them, the ones the converter reads and
    others it does not: bytes only, for a converter stand-in that never reads the weights."""
    head = {
        "config.json": b'{"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32}',
        "pytorch_model.bin": b"the head's weights " * 64,
        "README.md": b"# a model card",
        "docs/figure.png": b"a figure",
    }
    target = {
        "config.json": b'{"num_hidden_layers": 32, "hidden_size": 4096}',
        "generation_config.json": b'{"do_sample": true}',
        "tokenizer.json": b'{"model": {"type": "BPE"}}',
        "tokenizer_config.json": b'{"tokenizer_class": "PreTrainedTokenizerFast"}',
        "special_tokens_map.json": b'{"bos_token": "<|begin_of_text|>"}',
        "model-00001-of-00002.safetensors": b"the target's weights, part 1",
        "model-00002-of-00002.safetensors": b"the target's weights, part 2",
        "model.safetensors.index.json": b'{"weight_map": {}}',
        "original/tokenizer.model": b"in a folder",
        "LICENSE": b"a license",
    }
    return head, target


TINY_LAYERS, TINY_HIDDEN, TINY_DRAFT_VOCAB = 5, 64, 32
TINY_TEXT = [
    "the sea is blue and the sun is big",
    "a cat and a dog in the road",
    "hello world, code and edit a line",
    "the moon at night, the tree by day",
]


def tiny_eagle3_checkpoint() -> tuple[dict[str, bytes], dict[str, bytes]]:
    """A real, tiny EAGLE-3 checkpoint in the layout of the EAGLE authors' (config.json with
    draft_vocab_size and one layer, pytorch_model.bin with `midlayer.*`, fc, d2t and t2d), and
    its target's config.json with a SentencePiece tokenizer.model trained here. Needs torch and
    sentencepiece (the `convert` extra)."""
    import io
    import json

    import sentencepiece
    import torch

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TINY_TEXT * 20),
        model_writer=model,
        vocab_size=64,
        model_type="bpe",
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    n_vocab = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()
    hidden, ff = TINY_HIDDEN, 2 * TINY_HIDDEN
    config = {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": ff,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": n_vocab,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    target_config = {
        **config,
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": TINY_LAYERS,
    }
    head_config = {
        **config,
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_hidden_layers": 1,
        "draft_vocab_size": TINY_DRAFT_VOCAB,
    }
    generator = torch.Generator().manual_seed(0)

    def w(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.08).to(torch.float16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.float16)

    weights = {
        "fc.weight": w(hidden, 3 * hidden),
        "midlayer.self_attn.q_proj.weight": w(hidden, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": w(hidden, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": w(hidden, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": w(hidden, hidden),
        "midlayer.mlp.gate_proj.weight": w(ff, hidden),
        "midlayer.mlp.up_proj.weight": w(ff, hidden),
        "midlayer.mlp.down_proj.weight": w(hidden, ff),
        "midlayer.input_layernorm.weight": ones(hidden),
        "midlayer.hidden_norm.weight": ones(hidden),
        "midlayer.post_attention_layernorm.weight": ones(hidden),
        "norm.weight": ones(hidden),
        "lm_head.weight": w(TINY_DRAFT_VOCAB, hidden),
        # Draft id i is target id 2i, stored as the offset (EAGLE-3's d2t).
        "d2t": torch.arange(TINY_DRAFT_VOCAB, dtype=torch.int64),
        "t2d": torch.zeros(n_vocab, dtype=torch.bool),
    }
    buffer = io.BytesIO()
    torch.save(weights, buffer)
    head = {"config.json": json.dumps(head_config).encode(), "pytorch_model.bin": buffer.getvalue()}
    target = {
        "config.json": json.dumps(target_config).encode(),
        "tokenizer.model": model.getvalue(),
    }
    return head, target


def write_target_for_head(path: Path, head: Path, *, seed: int = 0) -> Path:
    """A tiny llama target (TINY_LAYERS layers of TINY_HIDDEN) with the tokenizer a converted
    head carries: the head's own target, as far as llama.cpp can tell."""
    reader = gguf.GGUFReader(str(head))

    def field(name: str) -> list:
        return reader.fields[name].contents()

    tokens = field("tokenizer.ggml.tokens")
    rng = np.random.default_rng(seed)

    def w(*shape: int, std: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    hidden, ff = TINY_HIDDEN, 2 * TINY_HIDDEN
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    writer.add_context_length(1024)
    writer.add_embedding_length(hidden)
    writer.add_block_count(TINY_LAYERS)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_rope_dimension_count(hidden // 4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model(field("tokenizer.ggml.model"))
    writer.add_token_list(tokens)
    writer.add_token_scores(field("tokenizer.ggml.scores"))
    writer.add_token_types(field("tokenizer.ggml.token_type"))
    writer.add_bos_token_id(field("tokenizer.ggml.bos_token_id"))
    writer.add_eos_token_id(field("tokenizer.ggml.eos_token_id"))
    tensors = {
        "token_embd.weight": w(len(tokens), hidden, std=1.0),
        "output_norm.weight": np.ones(hidden, dtype=np.float32),
        "output.weight": w(len(tokens), hidden, std=1.0),
    }
    for i in range(TINY_LAYERS):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(hidden, dtype=np.float32),
            f"blk.{i}.attn_q.weight": w(hidden, hidden),
            f"blk.{i}.attn_k.weight": w(hidden, hidden),
            f"blk.{i}.attn_v.weight": w(hidden, hidden),
            f"blk.{i}.attn_output.weight": w(hidden, hidden),
            f"blk.{i}.ffn_norm.weight": np.ones(hidden, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": w(ff, hidden),
            f"blk.{i}.ffn_up.weight": w(ff, hidden),
            f"blk.{i}.ffn_down.weight": w(hidden, ff),
        }
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# The converter stood in for at the process boundary: a script where specrun keeps llama.cpp's
# converter, run by specrun exactly as the real one would be. It records what it was given
# (its command line, the files in both folders, its environment) and then, by MODE: writes the
# GGUF at SOURCE to --outfile, fails as a converter does, or stops its parent mid-way.
STAND_IN = r"""
import json, os, shutil, signal, sys, time
from pathlib import Path

MODE, SOURCE, RECORD = {mode!r}, {source!r}, {record!r}
argv = sys.argv
head, target = Path(argv[1]), Path(argv[argv.index("--target-model-dir") + 1])
outfile = Path(argv[argv.index("--outfile") + 1])
def listing(folder):
    return {{p.name: [p.is_symlink(), p.read_bytes().hex()] for p in sorted(folder.iterdir())}}
calls = json.loads(Path(RECORD).read_text()) if Path(RECORD).exists() else []
calls.append({{
    "argv": [sys.executable, *argv], "head": listing(head), "target": listing(target),
    "offline": [os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE")],
    "pid": os.getpid(), "outfile_existed": outfile.exists(),
}})
Path(RECORD).write_text(json.dumps(calls))
print("INFO:hf-to-gguf:Loading model: checkpoint")
if MODE == "fail":
    print("Traceback (most recent call last):", file=sys.stderr)
    print("ValueError: EAGLE-3 d2t contains duplicate target ids", file=sys.stderr)
    sys.exit(1)
if MODE == "interrupt":
    outfile.write_bytes(b"GGUF half a file")
    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(60)
shutil.copyfile(SOURCE, outfile)
"""


def install_stand_in(cache: Path, version: str, *, mode: str, source: Path, record: Path) -> Path:
    """The stand-in where specrun keeps llama.cpp's converter for `version` (SPECRUN_CACHE)."""
    folder = cache / "converter" / f"llama-cpp-python-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "convert_hf_to_gguf.py"
    script.write_text(STAND_IN.format(mode=mode, source=str(source), record=str(record)))
    return script
