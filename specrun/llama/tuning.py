"""How llama.cpp holds and runs a model's context: the KV cache's types, flash attention,
mmap and mlock, the batch threads and RoPE scaling (issue 53), with their vocabularies as
llama.cpp's `common/arg.cpp` spells them and the rules llama.cpp applies to them, checked
here before anything loads. `params` hands them to llama.cpp; `footprint` counts them.

A quantized KV cache changes the model's numbers: its greedy text may differ from the f16
cache's. Speculation stays exact against plain decoding at the same types (the target's
cache decides every token either way)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from specrun.errors import OptionError

# llama.cpp's `kv_cache_types`, in its order.
CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
CACHE_TYPES: tuple[CacheType, ...] = get_args(CacheType)
FlashAttention = Literal["auto", "on", "off"]
FLASH_ATTENTION: tuple[FlashAttention, ...] = get_args(FlashAttention)
RopeScalingType = Literal["none", "linear", "yarn"]
ROPE_SCALING_TYPES: tuple[RopeScalingType, ...] = get_args(RopeScalingType)


def ggml_type(cache_type: CacheType) -> GGMLQuantizationType:
    """The ggml type a cache type names (its number is llama.cpp's `enum ggml_type`)."""
    return GGMLQuantizationType[cache_type.upper()]


def quantized(cache_type: CacheType) -> bool:
    return cache_type not in ("f32", "f16", "bf16")


def row_bytes(cache_type: CacheType, values: int) -> int:
    """Bytes of `values` values of a type: ggml_row_size (whole blocks)."""
    block, size = GGML_QUANT_SIZES[ggml_type(cache_type)]
    return values // block * size


@dataclass(frozen=True)
class CacheTypes:
    """The KV cache's K and V types."""

    k: CacheType = "f16"
    v: CacheType = "f16"

    def __post_init__(self) -> None:
        for name, value in (("cache_type_k", self.k), ("cache_type_v", self.v)):
            if value not in CACHE_TYPES:
                raise OptionError(
                    f"`{name}` must be one of {', '.join(CACHE_TYPES)}, got {value!r}"
                )

    @property
    def quantized(self) -> bool:
        return quantized(self.k) or quantized(self.v)

    def check_flash_attention(self, flash_attn: FlashAttention) -> None:
        """llama.cpp keeps a quantized V cache only with flash attention."""
        if quantized(self.v) and flash_attn == "off":
            raise OptionError(
                f"a quantized V cache (`cache_type_v` {self.v}) needs flash attention, as in "
                "llama.cpp: use `flash_attn` on or auto"
            )

    def check_heads(self, head_k: int, head_v: int, model: str) -> None:
        """A quantized type stores whole blocks: each head's values must be a whole number
        of them (llama.cpp refuses the context, or its views of a head would split a block)."""
        for name, kind, head in (
            ("cache_type_k", self.k, head_k),
            ("cache_type_v", self.v, head_v),
        ):
            block = GGML_QUANT_SIZES[ggml_type(kind)][0]
            if head % block:
                raise OptionError(
                    f"`{name}` {kind} stores blocks of {block} values, which do not divide "
                    f"{model}'s attention heads of {head}: use f16, or a type of smaller blocks"
                )


@dataclass(frozen=True)
class Rope:
    """RoPE scaling as llama.cpp takes it; None: the model's own."""

    scaling: RopeScalingType | None = None
    freq_base: float | None = None  # NTK-aware scaling's base
    freq_scale: float | None = None  # 1/N stretches the positions N times (--rope-scale N)
    yarn_orig_ctx: int | None = None  # YaRN's original context; None: the model's

    def __post_init__(self) -> None:
        if self.scaling is not None and self.scaling not in ROPE_SCALING_TYPES:
            raise OptionError(f"`rope_scaling` must be none, linear or yarn, got {self.scaling!r}")
        if self.freq_base is not None and not self.freq_base > 0:
            raise OptionError(f"`rope_freq_base` must be more than 0, got {self.freq_base}")
        if self.freq_scale is not None and not 0 < self.freq_scale <= 1:
            raise OptionError(
                f"`rope_freq_scale` must be more than 0 and at most 1, got {self.freq_scale}"
            )
        if self.yarn_orig_ctx is not None and self.yarn_orig_ctx < 1:
            raise OptionError(f"`yarn_orig_ctx` must be at least 1, got {self.yarn_orig_ctx}")
        if self.scaling == "none" and self.freq_scale not in (None, 1):
            raise OptionError(
                "`rope_scaling` none scales no positions (llama.cpp ignores the factor then): "
                "give linear or yarn with `rope_scale`"
            )

    def reach(self, trained: int, original: int | None = None) -> int | None:
        """The most positions the model covers with this scaling: its trained context, or
        the original one (`yarn_orig_ctx`, else the model's `original`, else trained) over
        the factor, as llama.cpp's YaRN counts it; None where only the base frequency moved
        (NTK-aware scaling has no fixed reach: the user chose the base for the context)."""
        if self.freq_scale is not None and self.freq_scale < 1 and self.scaling != "none":
            base = trained
            if self.scaling == "yarn":
                base = self.yarn_orig_ctx or original or trained
            return int(base / self.freq_scale)
        if self.freq_base is not None:
            return None
        return trained

    def check_context(self, asked: int, trained: int, model: str) -> None:
        """A context past the trained one is RoPE scaling's: a scaling type without its
        factor cannot reach it."""
        if (
            asked > trained
            and self.scaling in ("linear", "yarn")
            and self.reach(trained) == trained
        ):
            raise OptionError(
                f"`n_ctx` {asked} is more than {model} was trained for ({trained}): "
                f"`rope_scaling` {self.scaling} needs a factor to reach it, e.g. "
                f"`rope_scale` {-(-asked // trained)}"
            )


@dataclass(frozen=True)
class Tuning:
    """One model's memory and speed knobs, llama.cpp's defaults unless given."""

    cache: CacheTypes = CacheTypes()
    flash_attn: FlashAttention = "auto"
    mmap: bool = True
    mlock: bool = False  # keep the weights in RAM (llama.cpp warns where the limit forbids it)
    threads_batch: int | None = None  # prompt and verify batches; None: the threads
    rope: Rope = Rope()

    def __post_init__(self) -> None:
        if self.flash_attn not in FLASH_ATTENTION:
            raise OptionError(f"`flash_attn` must be on, off or auto, got {self.flash_attn!r}")
        if self.threads_batch is not None and self.threads_batch < 1:
            raise OptionError(f"`threads_batch` must be at least 1, got {self.threads_batch}")
        self.cache.check_flash_attention(self.flash_attn)

    @property
    def resident_weights(self) -> bool:
        """Whether the weights take memory of their own (read in, or locked), not pages of
        the file the system may drop."""
        return not self.mmap or self.mlock
