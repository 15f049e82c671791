"""The placement rule: the draft wholly on the GPU first, then as many target layers as fit."""

from __future__ import annotations

import pytest

from specrun.llama.footprint import Footprint
from specrun.llama.placement import GIB, MARGIN, Gpu, PlacementError, gpu_bytes, place_layers

GB = 10**9


def model(
    name: str, layers: int, layer: int, *, kv: int, output: int, inputs: int, compute: int
) -> Footprint:
    return Footprint(
        name=name,
        n_layer=layers,
        layer_weights=(layer,) * layers,
        input_weights=inputs,
        output_weights=output,
        kv_per_layer=kv,
        compute=compute,
    )


# Round numbers so every count below is a line of arithmetic.
TARGET = model(
    "target.gguf", 10, 1 * GB, kv=GB // 10, output=GB // 2, inputs=GB // 2, compute=GB // 2
)
DRAFT = model(
    "draft.gguf", 4, GB // 4, kv=0, output=0, inputs=GB // 10, compute=0
)  # 1 GB on the GPU


def test_gpu_bytes_follow_llama_cpps_offload_order():
    assert gpu_bytes(TARGET, 0) == 0
    assert (
        gpu_bytes(TARGET, 1) == 1 * GB + GB // 10 + GB // 2
    )  # the last layer, its KV, the compute buffer
    assert gpu_bytes(TARGET, 10) == 10 * GB + GB + GB // 2
    assert (
        gpu_bytes(TARGET, 11) == 10 * GB + GB + GB // 2 + GB // 2
    )  # n_layer + 1: the output layer too


def test_the_draft_goes_first_then_the_target_layers_that_fit():
    # 8 GB + 1 GiB margin free: 8 GB of room. Draft 1 GB -> 7 GB left. Target: compute 0.5 GB,
    # then 1.1 GB a layer: 0.5 + 5 * 1.1 = 6.0 <= 7 < 7.1 = 0.5 + 6 * 1.1 -> 5 layers.
    placed = place_layers(TARGET, DRAFT, [Gpu("CUDA0", 8 * GB + MARGIN, 24 * GB)], cpu_free=64 * GB)
    assert (placed.target_layers, placed.draft_layers) == (5, 5)
    assert placed.split is None and placed.draft_gpu is None
    assert (
        placed.line
        == "target: 5/10 layers on CUDA0 (9.1 of 24.0 GB free), 5 on CPU; draft: 4/4 on CUDA0"
    )


def test_everything_fits_and_the_output_layer_goes_too():
    # 0.5 + 10 * 1.1 + 0.5 (output) = 12.0 GB of room needed, beside the 1 GB draft.
    placed = place_layers(
        TARGET, DRAFT, [Gpu("CUDA0", 13 * GB + MARGIN, 24 * GB)], cpu_free=64 * GB
    )
    assert (
        placed.target_layers == 11
        and "10/10 layers on CUDA0" in placed.line
        and "on CPU" not in placed.line
    )


def test_two_gpus_split_the_target_by_free_memory():
    # Budgets 6 and 3 GB; the draft takes 1 GB of the larger: 5 + 3 = 8 GB of room,
    # 0.5 + 6 * 1.1 = 7.1 <= 8 < 8.2 -> 6 layers, split 5:3.
    placed = place_layers(
        TARGET,
        DRAFT,
        [Gpu("CUDA0", 6 * GB + MARGIN, 24 * GB), Gpu("CUDA1", 3 * GB + MARGIN, 24 * GB)],
        cpu_free=64 * GB,
    )
    assert placed.target_layers == 6
    assert placed.split == pytest.approx((5 / 8, 3 / 8)) and placed.draft_gpu == 0


def test_rpc_devices_take_target_layers_and_the_draft_stays_here():
    # The remote device has the most free memory, yet the draft goes on CUDA0 (4 GB of room,
    # 3 left); the target gets 20 + 3 GB of room, enough for all of it (12.0 GB), split 20:3.
    remote = Gpu("RPC0", 20 * GB + MARGIN, 24 * GB, endpoint="10.0.0.2:50052")
    placed = place_layers(
        TARGET, DRAFT, [remote, Gpu("CUDA0", 4 * GB + MARGIN, 8 * GB)], cpu_free=64 * GB
    )
    assert (placed.target_layers, placed.draft_layers, placed.draft_gpu) == (11, 5, None)
    assert placed.split == pytest.approx((20 / 23, 3 / 23))
    assert placed.line.startswith(
        "target: 10/10 layers on RPC0@10.0.0.2:50052 + CUDA0 (RPC0: 21.1 of 24.0 GB free"
    )
    assert placed.line.endswith("; draft: 4/4 on CUDA0")


def test_with_only_remote_devices_the_draft_runs_on_this_machines_cpu():
    # 8 GB of room, all the target's: 0.5 + 6 * 1.1 = 7.1 <= 8 < 8.2 -> 6 layers.
    placed = place_layers(
        TARGET, DRAFT, [Gpu("RPC0", 8 * GB + MARGIN, 16 * GB, endpoint="h:1")], cpu_free=64 * GB
    )
    assert (placed.target_layers, placed.draft_layers) == (6, 0)
    assert placed.line == (
        "target: 6/10 layers on RPC0@h:1 (9.1 of 16.0 GB free), 4 on CPU; "
        "draft: on this machine's CPU"
    )


def test_a_draft_that_cannot_fit_is_said_before_loading():
    with pytest.raises(
        PlacementError,
        match=r"the draft draft.gguf needs 1.0 GB on the GPU and CUDA0 has 1.5 GB free",
    ):
        place_layers(TARGET, DRAFT, [Gpu("CUDA0", int(1.5 * GB), 24 * GB)], cpu_free=64 * GB)


def test_a_target_the_cpu_cannot_hold_either_is_said_with_the_numbers():
    # No layer fits beside the draft: everything stays in system memory,
    # 0.5 (input) + 10 + 10 * 0.1 (KV) + 0.5 (output) + 0.5 (compute) + 0.1 (draft input) = 12.6 GB.
    with pytest.raises(
        PlacementError,
        match=r"needs 12.6 GB of system memory beyond the GPUs and 8.0 GB is available",
    ):
        place_layers(TARGET, DRAFT, [Gpu("CUDA0", 1 * GB + MARGIN, 24 * GB)], cpu_free=8 * GB)


def test_a_gpu_that_shares_the_systems_memory_counts_against_it():
    # Apple silicon: all 11 target layers (12.0 GB) and the draft (1.0 GB) fit MTL0's working
    # set, but the same memory also holds the target's input layer and the draft's (0.6 GB).
    metal = Gpu("MTL0", 20 * GB + MARGIN, 24 * GB, shares_host_memory=True)
    placed = place_layers(TARGET, DRAFT, [metal], cpu_free=16 * GB)
    assert (placed.target_layers, placed.draft_layers) == (11, 5)
    with pytest.raises(
        PlacementError,
        match=r"needs 13.6 GB of memory, which the GPU shares with the system, and 12.0 GB is",
    ):
        place_layers(TARGET, DRAFT, [metal], cpu_free=12 * GB)
    discrete = Gpu("CUDA0", 20 * GB + MARGIN, 24 * GB)  # its own memory: 0.6 GB on the CPU
    assert place_layers(TARGET, DRAFT, [discrete], cpu_free=12 * GB).target_layers == 11


def test_the_margin_is_a_gib():
    assert MARGIN == GIB


# --- the headline pair: Llama-3.3-70B Q4_K_M and Llama-3.2-1B Q4_K_M, n_ctx 4096 -------------
#
# From the synthetic headers (tests/support/synthetic_headers.py, checked in
# tests/integration/test_footprint.py):
#   a 70B layer with Q6_K attn_v/ffn_down ("big"): 544,079,872 B + 16,777,216 B KV = 560,857,088 B
#   the other 70B layers ("small", Q5_K attn_v, Q4_K ffn_down): 482,410,496 + 16,777,216
#       = 499,187,712 B
#   big layers: 0-9, 70-79 and every third between (12, 15, ..., 69); compute 296,222,720 B;
#   output 861,913,088 B. The 1B draft, whole on the GPU: 989,667,328 B.
# Offloading runs from layer 79 down: 10 big layers, then (big, small, small) groups of
# 1,559,232,512 B.
#   8 GB:   room 8e9 - 2^30 - 989,667,328 = 5,936,590,848; 296,222,720 + 10 big = 5,904,793,600
#           fits, an 11th big layer (6,465,650,688) does not                    -> 10 layers
#   24 GB:  room 21,936,590,848; after compute and 10 big: 16,031,797,248 = 10 groups
#           (15,592,325,120) + 439,472,128, less than a big layer               -> 40 layers
#   48 GB:  room 45,936,590,848 >= compute + 40 big + 40 small + output
#           = 43,559,927,808                                                    -> all + output
#   2 x 8:  room 2 (8e9 - 2^30) - 989,667,328 = 12,862,849,024; after compute and 10 big:
#           6,958,055,424 = 4 groups (6,236,930,048) + one big layer,
#           then 160,268,288                                                    -> 23 layers
#   2 x 24: room 45,862,849,024 >= 43,559,927,808                               -> all + output
GB_70B_TABLE = [([8], 10), ([24], 40), ([48], 81), ([80], 81), ([8, 8], 23), ([24, 24], 81)]


@pytest.fixture(scope="module")
def headline_pair():
    from specrun.llama.footprint import footprint
    from tests.support.synthetic_headers import llama_1b_q4_k_m, llama_70b_q4_k_m

    return (
        footprint(*llama_70b_q4_k_m(), name="Llama-3.3-70B-Instruct-Q4_K_M.gguf", n_ctx=4096),
        footprint(*llama_1b_q4_k_m(), name="Llama-3.2-1B-Instruct-Q4_K_M.gguf", n_ctx=4096),
    )


@pytest.mark.parametrize("gpus, layers", GB_70B_TABLE)
def test_the_70b_and_1b_pair_on_the_gpus_people_own(headline_pair, gpus, layers):
    target, draft = headline_pair
    placed = place_layers(
        target,
        draft,
        [Gpu(f"CUDA{i}", gb * GB, gb * GB) for i, gb in enumerate(gpus)],
        cpu_free=128 * GB,
    )
    assert placed.target_layers == layers
    assert placed.draft_layers == draft.n_layer + 1  # the draft always goes whole
    on_gpu = min(layers, 80)
    assert f"target: {on_gpu}/80 layers" in placed.line and "draft: 16/16 on CUDA0" in placed.line
    assert (f"{80 - on_gpu} on CPU" in placed.line) == (on_gpu < 80)
    if len(gpus) > 1:
        assert placed.split is not None and sum(placed.split) == pytest.approx(1.0)


def test_the_70b_target_on_8_gb_with_16_gb_of_ram_is_refused_before_loading(headline_pair):
    target, draft = headline_pair
    with pytest.raises(
        PlacementError,
        match=r"needs .* GB of system memory beyond the GPUs and 16.0 GB is available",
    ):
        place_layers(target, draft, [Gpu("CUDA0", 8 * GB, 8 * GB)], cpu_free=16 * GB)
