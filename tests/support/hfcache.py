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
