"""The memory and speed knobs before anything loads: their checks, what the memory rule
counts of them (the KV cache at its types, the compute buffer without flash attention, a
context stretched by RoPE scaling), and placement's answers at each."""

from __future__ import annotations

import pytest

from specrun.errors import OptionError
from specrun.llama.footprint import footprint, kv_bytes_per_layer
from specrun.llama.placement import (
    GIB,
    MARGIN,
    Gpu,
    PlacementError,
    check_system_memory,
    place_layers,
)
from specrun.llama.tuning import CacheTypes, Rope, Tuning
from tests.support.synthetic_headers import llama_8b_q4_k_m

GB = 10**9
LLAMA_8B = "Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def llama_8b(n_ctx: int, tuning: Tuning = Tuning()):
    return footprint(*llama_8b_q4_k_m(), name=LLAMA_8B, n_ctx=n_ctx, tuning=tuning)


def test_the_kv_cache_counts_at_its_types():
    # Llama-3.1-8B: 8 KV heads of 128 values, 1024 values a layer and position in K, as many in V.
    _, meta = llama_8b_q4_k_m()
    f16 = kv_bytes_per_layer(meta, 1)
    assert f16 == 2 * 1024 * 2  # K and V, 2 bytes a value
    assert kv_bytes_per_layer(meta, 1, CacheTypes("q8_0", "q8_0")) == 2 * 1024 // 32 * 34
    assert kv_bytes_per_layer(meta, 1, CacheTypes("q4_0", "q4_0")) == 2 * 1024 // 32 * 18
    assert kv_bytes_per_layer(meta, 1, CacheTypes("q8_0", "f16")) == 1024 // 32 * 34 + 1024 * 2
    # 131072 positions of 32 layers: 16 GiB at f16, 8.5 GiB at q8_0.
    assert llama_8b(131072).n_layer * llama_8b(131072).kv_per_layer == 16 * GIB
    q8 = llama_8b(131072, Tuning(cache=CacheTypes("q8_0", "q8_0")))
    assert q8.n_layer * q8.kv_per_layer == 16 * GIB * 34 // 64


def test_without_flash_attention_the_compute_buffer_holds_each_heads_scores():
    on, off = llama_8b(8192), llama_8b(8192, Tuning(flash_attn="off"))
    # 512 tokens a ubatch. With flash attention the logits phase is the larger (f32 over
    # 128256 ids, hidden state and norm); without, the layers' with 32 heads' f32 scores
    # over 8192 positions besides the f16 mask, the FFN's three and four hidden-sized rows.
    assert on.compute == 512 * (4 * 128256 + 8 * 4096)
    assert off.compute == 512 * (4 * 8192 * 32 + 2 * 8192 + 12 * 14336 + 16 * 4096)
    assert llama_8b(8192, Tuning(flash_attn="auto")).compute == on.compute


def test_a_quantized_cache_lets_more_layers_on_the_gpu():
    # 12 GB free on one GPU, a 32k context for each of 4 slots: at f16 the KV cache alone is
    # 17.2 GB; at q4_0 a quarter and a bit.
    gpu = [Gpu("CUDA0", 12 * GB + MARGIN, 24 * GB)]
    f16 = place_layers(llama_8b(32768).for_sequences(4), None, gpu, cpu_free=64 * GB)
    q4 = place_layers(
        llama_8b(32768, Tuning(cache=CacheTypes("q4_0", "q4_0"))).for_sequences(4),
        None,
        gpu,
        cpu_free=64 * GB,
    )
    assert f16.target_layers < q4.target_layers == 33  # every layer and the output


def test_without_a_gpu_the_kv_cache_must_fit_the_system_memory():
    big = llama_8b(131072).for_sequences(2)  # 32 GiB of KV cache
    with pytest.raises(PlacementError) as error:
        check_system_memory(big, None, 24 * GB, Tuning())
    assert str(error.value) == (
        f"{LLAMA_8B} needs 34.6 GB of system memory, its KV cache 34.4 GB of it, and 24.0 GB "
        "is available: use a smaller `n_ctx`, a quantized KV cache (`cache_type_k`, "
        "`cache_type_v`) or a smaller model"
    )
    quantized = Tuning(cache=CacheTypes("q4_0", "q4_0"))
    check_system_memory(
        llama_8b(131072, quantized).for_sequences(2), None, 24 * GB, quantized
    )  # 9.7 GB: fits


def test_weights_count_only_where_they_are_read_in_or_locked():
    model = llama_8b(4096)  # 4.9 GB of weights, 0.5 GB of KV cache
    room = 2 * GB
    check_system_memory(model, None, room, Tuning())  # mapped: pages the system may drop
    for tuning in Tuning(mmap=False), Tuning(mlock=True):
        with pytest.raises(PlacementError):
            check_system_memory(model, None, room, tuning)


def test_rope_scaling_stretches_the_context_the_rule_counts():
    trained = 131072
    assert llama_8b(2 * trained).kv_per_layer == llama_8b(trained).kv_per_layer  # capped
    stretched = llama_8b(2 * trained, Tuning(rope=Rope(scaling="yarn", freq_scale=0.25)))
    assert stretched.kv_per_layer == 2 * llama_8b(trained).kv_per_layer


def test_rope_reach():
    assert Rope().reach(4096) == 4096
    assert Rope(freq_scale=0.25).reach(4096) == 16384  # the model's type, else linear
    assert Rope(scaling="linear", freq_scale=0.5).reach(4096) == 8192
    # YaRN from the original context: the option's, else the model's, else the trained one.
    assert Rope(scaling="yarn", freq_scale=0.25).reach(4096, original=2048) == 8192
    assert Rope(scaling="yarn", freq_scale=0.25, yarn_orig_ctx=1024).reach(4096, 2048) == 4096
    assert Rope(freq_base=1e6).reach(4096) is None  # NTK-aware: the user's choice
    assert Rope(scaling="none").reach(4096) == 4096


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: CacheTypes("q9", "f16"),
            "`cache_type_k` must be one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, "
            "q5_1, got 'q9'",
        ),
        (
            lambda: Tuning(cache=CacheTypes("f16", "q8_0"), flash_attn="off"),
            "a quantized V cache (`cache_type_v` q8_0) needs flash attention, as in llama.cpp: "
            "use `flash_attn` on or auto",
        ),
        (lambda: Tuning(flash_attn="yes"), "`flash_attn` must be on, off or auto, got 'yes'"),
        (lambda: Tuning(threads_batch=0), "`threads_batch` must be at least 1, got 0"),
        (
            lambda: Rope(scaling="cubic"),  # type: ignore[arg-type]
            "`rope_scaling` must be none, linear or yarn, got 'cubic'",
        ),
        (
            lambda: Rope(freq_scale=2.0),
            "`rope_freq_scale` must be more than 0 and at most 1, got 2.0",
        ),
        (lambda: Rope(freq_base=0.0), "`rope_freq_base` must be more than 0, got 0.0"),
        (
            lambda: Rope(scaling="none", freq_scale=0.5),
            "`rope_scaling` none scales no positions (llama.cpp ignores the factor then): "
            "give linear or yarn with `rope_scale`",
        ),
        (
            lambda: Rope(scaling="yarn").check_context(8192, 2048, "m.gguf"),
            "`n_ctx` 8192 is more than m.gguf was trained for (2048): `rope_scaling` yarn "
            "needs a factor to reach it, e.g. `rope_scale` 4",
        ),
        (
            lambda: CacheTypes("q8_0", "q8_0").check_heads(16, 16, "tiny.gguf"),
            "`cache_type_k` q8_0 stores blocks of 32 values, which do not divide tiny.gguf's "
            "attention heads of 16: use f16, or a type of smaller blocks",
        ),
    ],
)
def test_bad_values_are_one_line_errors(make, message):
    with pytest.raises(OptionError) as error:
        make()
    assert str(error.value) == message
