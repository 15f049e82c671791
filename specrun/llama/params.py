"""llama.cpp's model and context parameters as ctypes structures: GPU layers and their
split, the devices, the tensor overrides that keep weights off AMX but on REPACK, and the
memory and speed knobs (`tuning`)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

import llama_cpp as llama

from specrun.core.gamma import GAMMA_LIMIT
from specrun.llama.devices import (
    BuildInfo,
    repack_buffer_type,
    repack_patterns,
    use_extra_buffer_types,
)
from specrun.llama.invariance import INVARIANT_REPACK_TYPES
from specrun.llama.native import load_progress_callback
from specrun.llama.tuning import Tuning, ggml_type

FLASH_ATTENTION_TYPES = {
    "auto": llama.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
ROPE_SCALING_TYPES = {
    None: llama.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
    "none": llama.LLAMA_ROPE_SCALING_TYPE_NONE,
    "linear": llama.LLAMA_ROPE_SCALING_TYPE_LINEAR,
    "yarn": llama.LLAMA_ROPE_SCALING_TYPE_YARN,
}
# (mmap, mlock) -> llama.cpp's load mode; mmap without mlock is its default, `auto`.
LOAD_MODES = {
    (True, False): llama.LLAMA_LOAD_MODE_AUTO,
    (False, False): llama.LLAMA_LOAD_MODE_NONE,
    (True, True): llama.LLAMA_LOAD_MODE_MMAP_MLOCK,
    (False, True): llama.LLAMA_LOAD_MODE_MLOCK,
}


class _TensorOverride(ctypes.Structure):  # struct llama_model_tensor_buft_override
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def load_params(
    gpu_layers: int,
    build: BuildInfo,
    *,
    allow_amx: bool,
    tensors: Callable[[], list[tuple[str, str, tuple[int, ...]]]] = lambda: [],
    split: Sequence[float] | None = None,
    main_gpu: int | None = None,
    devices: Sequence[int] | None = None,
    reproducible: bool = False,
    tuning: Tuning = Tuning(),
) -> llama.llama_model_params:
    """llama.cpp's model parameters: the GPU layers, and weights kept off AMX unless allowed.

    Off AMX, the weights REPACK can take go to it by tensor overrides (`tensors()`, the
    GGUF tensor table, is read only then), so the guard costs no speed where REPACK applies.
    `reproducible` keeps the extra buffer types off and hands REPACK only the types whose
    kernels are batch-invariant. `split` shares the layers over the GPUs; `main_gpu` keeps
    the whole model on one. `devices` (ggml handles, RPC servers' among them) replaces the
    GPUs llama.cpp would pick, in the order `split` follows.
    """
    # The binding returns Any (llama_cpp's ctypes_function is untyped); the struct is typed.
    params: llama.llama_model_params = llama.llama_model_default_params()
    params.n_gpu_layers = gpu_layers
    params.load_mode = LOAD_MODES[tuning.mmap, tuning.mlock]
    if split:
        shares = (ctypes.c_float * llama.llama_max_devices())(*split)
        params.tensor_split, params.split_alive = shares, shares
    if main_gpu is not None:
        params.split_mode, params.main_gpu = llama.LLAMA_SPLIT_MODE_NONE, main_gpu
    if devices is not None:
        handles = (ctypes.c_void_p * (len(devices) + 1))(*devices)  # NULL-terminated
        # llama_cpp annotates `devices` and `tensor_buft_overrides` as arrays: both fields
        # are pointers (c_void_p) to the first element.
        params.devices = ctypes.cast(handles, ctypes.c_void_p)  # type: ignore[assignment]
        params.devices_alive = handles
    params.use_extra_bufts = use_extra_buffer_types(build.has_amx, allow_amx) and not reproducible
    params.progress_callback = load_progress_callback()
    repack = repack_buffer_type() if not params.use_extra_bufts else None
    table = tensors() if repack else []
    if reproducible:
        table = [tensor for tensor in table if tensor[1] in INVARIANT_REPACK_TYPES]
    patterns = repack_patterns(table, build) if table else []
    if patterns:
        overrides = (_TensorOverride * (len(patterns) + 1))()  # NULL-terminated
        for override, pattern in zip(overrides, patterns):
            override.pattern, override.buft = pattern.encode(), repack
        first = ctypes.cast(overrides, ctypes.c_void_p)
        params.tensor_buft_overrides = first  # type: ignore[assignment]  # a pointer, as `devices`
        params.overrides_alive = overrides  # llama.cpp reads them during the load only
    return params


def context_params(
    n_ctx: int,
    n_batch: int,
    threads: int,
    sequences: int = 1,
    *,
    shared_pool: bool = False,
    branches: int = 0,
    tuning: Tuning = Tuning(),
) -> llama.llama_context_params:
    """llama.cpp's context parameters: `sequences` of `n_ctx` positions each, in one pool of
    cells (`shared_pool`: a batch of several sequences decodes as one ubatch, where split
    streams would cut it into equal parts per sequence) or in a stream each. `branches`: one
    sequence and that many more for a token tree's branches, sharing its cells in one pool,
    with room for a tree's nodes past its `n_ctx`. `tuning`: the KV cache's types, flash
    attention, the batch threads and RoPE scaling (None: the model's own)."""
    params: llama.llama_context_params = llama.llama_context_default_params()
    params.n_ctx = n_ctx * sequences + (GAMMA_LIMIT if branches else 0)  # a tree: γ nodes
    params.n_batch = params.n_ubatch = n_batch
    params.n_seq_max = sequences + branches
    params.kv_unified = shared_pool or branches > 0
    params.n_outputs_max_per_seq = GAMMA_LIMIT + 1  # a verify's rows, when sampled
    params.n_threads = threads
    params.n_threads_batch = tuning.threads_batch or threads
    params.type_k, params.type_v = int(ggml_type(tuning.cache.k)), int(ggml_type(tuning.cache.v))
    params.flash_attn_type = FLASH_ATTENTION_TYPES[tuning.flash_attn]
    rope = tuning.rope
    params.rope_scaling_type = ROPE_SCALING_TYPES[rope.scaling]
    params.rope_freq_base = rope.freq_base or 0.0  # 0: the model's
    params.rope_freq_scale = rope.freq_scale or 0.0
    params.yarn_orig_ctx = rope.yarn_orig_ctx or 0
    params.swa_full = True  # a sliding-window cache could not drop a rejected suffix
    params.no_perf = True
    return params
