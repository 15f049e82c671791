"""The memory estimate (specrun/llama/footprint.py) against llama.cpp's own log and hand
arithmetic."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFReader

from specrun.llama.footprint import estimate, footprint
from specrun.llama.gguf import tensors_and_metadata
from tests.support.synthetic_headers import llama_1b_q4_k_m, llama_70b_q4_k_m
from tests.support.tinymodels import vocabulary

MIB = 2**20
# Bytes per 256 values in llama.cpp's k-quants (ggml-common.h: block_q4_K, block_q5_K, block_q6_K).
Q4_K, Q5_K, Q6_K = 144, 176, 210

LOAD_AND_LOG = """
import sys
from specrun.llama.model import Model
Model(sys.argv[1], n_ctx=int(sys.argv[2]), gpu_layers=0, threads=1, verbose=True)
"""
BUFFER_LINE = re.compile(r"(\S+) (model|KV|compute) buffer size =\s+([\d.]+) MiB")


def logged_buffers(path: Path, n_ctx: int) -> dict[str, float]:
    """MiB by kind (model, KV, compute) that llama.cpp logs while loading `path`, summed over
    buffers, leaving out CPU_REPACK: its tensors are copies of ones the mapped buffer's range spans
    too."""
    log = subprocess.run(
        [sys.executable, "-c", LOAD_AND_LOG, str(path), str(n_ctx)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stderr
    sizes = {"model": 0.0, "KV": 0.0, "compute": 0.0}
    for buffer, kind, mib in BUFFER_LINE.findall(log):
        if buffer != "CPU_REPACK":
            sizes[kind] += float(mib)
    return sizes


@pytest.fixture(scope="module")
def demo_headers(demo_pair: tuple[Path, Path]) -> dict[Path, tuple]:
    return {path: tensors_and_metadata(path) for path in demo_pair}  # read once: seconds each


@pytest.mark.parametrize("n_ctx", [512, 4096])
@pytest.mark.parametrize("which", [0, 1], ids=["f16-target", "q4_0-draft"])
def test_estimate_matches_what_llama_cpp_allocates(
    demo_pair, demo_headers, which: int, n_ctx: int
) -> None:
    path = demo_pair[which]
    tensors, meta = demo_headers[path]
    estimated = footprint(tensors, meta, name=path.name, n_ctx=n_ctx)
    logged = logged_buffers(path, n_ctx)
    assert estimated.weights / MIB == pytest.approx(logged["model"], rel=0.10)
    assert estimated.n_layer * estimated.kv_per_layer / MIB == pytest.approx(logged["KV"], rel=0.10)
    assert estimated.compute / MIB == pytest.approx(logged["compute"], rel=0.10)


def test_tiny_model_bytes_by_hand(tiny_target: Path) -> None:
    # tinymodels: F32 llama, n_embd 64, n_ff 128, 4 heads of 16, 2 layers, tied=False.
    n_vocab = 5 + 256 + 81  # control tokens, byte tokens, word pieces
    assert len(vocabulary()[0]) == n_vocab
    got = estimate(tiny_target, n_ctx=1024, n_ubatch=512)
    layer = 4 * 64 * 64 * 4 + 3 * 128 * 64 * 4 + 2 * 64 * 4  # q k v o, gate up down, two norms: f32
    assert got.n_layer == 2
    assert got.layer_weights == (layer, layer) == (164352, 164352)
    assert got.input_weights == n_vocab * 64 * 4  # token_embd
    assert got.output_weights == 64 * 4 + n_vocab * 64 * 4  # output_norm, output
    assert (
        got.weights == tiny_target.stat().st_size - GGUFReader(tiny_target).data_offset
    )  # the data section
    assert got.kv_per_layer == 1024 * (4 * 16 + 4 * 16) * 2  # K and V f16 at every position
    # The larger phase here is the layers': f16 mask, 3 n_ff f32, 4 n_embd f32 per token.
    assert got.compute == 512 * (2 * 1024 + 12 * 128 + 16 * 64)
    assert got.total == got.weights + 2 * got.kv_per_layer + got.compute


def test_llama_70b_q4_k_m_by_hand() -> None:
    tensors, meta = llama_70b_q4_k_m()
    got = footprint(tensors, meta, name="Llama-3.3-70B-Instruct-Q4_K_M.gguf", n_ctx=4096)
    n_embd, n_ff, n_kv, n_vocab = 8192, 28672, 8 * 128, 128256
    q_and_o = 2 * n_embd * n_embd // 256 * Q4_K
    k = n_embd * n_kv // 256 * Q4_K
    gate_and_up = 2 * n_embd * n_ff // 256 * Q4_K
    norms = 2 * n_embd * 4
    # use_more_bits: layers 0-9, 70-79 and every third from 12 to 69 take Q6_K for attn_v and
    # ffn_down.
    more_bits = (
        q_and_o
        + k
        + n_embd * n_kv // 256 * Q6_K
        + gate_and_up
        + n_ff * n_embd // 256 * Q6_K
        + norms
    )
    plain = (
        q_and_o
        + k
        + n_embd * n_kv // 256 * Q5_K
        + gate_and_up
        + n_ff * n_embd // 256 * Q4_K
        + norms
    )
    assert (got.layer_weights[0], got.layer_weights[10], got.layer_weights[12]) == (
        more_bits,
        plain,
        more_bits,
    )
    assert got.layer_weights.count(more_bits) == 10 + 10 + 20
    assert got.input_weights == n_embd * n_vocab // 256 * Q4_K + 64 * 4  # token_embd, rope_freqs
    assert got.output_weights == n_embd * 4 + n_embd * n_vocab // 256 * Q6_K
    assert got.weights == pytest.approx(42.5e9, rel=0.03)
    assert got.kv_per_layer == 4096 * 2 * 8 * 128 * 2 == 16_777_216  # 16.8 MB a layer
    assert got.n_layer * got.kv_per_layer == pytest.approx(1.34e9, rel=0.01)
    # The logits outweigh the layers: 4 n_vocab + 8 n_embd f32 bytes a token, 282.5 MiB.
    assert got.compute == 512 * (4 * n_vocab + 8 * n_embd)


def test_llama_1b_q4_k_m_ties_its_output_to_the_embedding() -> None:
    tensors, meta = llama_1b_q4_k_m()
    got = footprint(tensors, meta, name="Llama-3.2-1B-Instruct-Q4_K_M.gguf", n_ctx=4096)
    assert got.n_layer == 16
    assert got.output_weights == 2048 * 4  # output_norm alone
    assert (
        got.input_weights == 2048 * 128256 // 256 * Q6_K + 32 * 4
    )  # token_embd (Q6_K: it is the output), rope_freqs
    assert got.weights == pytest.approx(0.81e9, rel=0.03)
    assert got.kv_per_layer == 4096 * 2 * 8 * 64 * 2


def test_context_and_batch_scale_kv_and_compute() -> None:
    tensors, meta = llama_1b_q4_k_m()
    small = footprint(tensors, meta, name="1b", n_ctx=4096, n_ubatch=128)
    large = footprint(tensors, meta, name="1b", n_ctx=8192, n_ubatch=512)
    assert large.kv_per_layer == 2 * small.kv_per_layer
    assert large.compute == 4 * small.compute
    assert (
        footprint(tensors, meta, name="1b", n_ctx=256).compute == large.compute // 2
    )  # batch capped at n_ctx
