"""What a model needs in memory before it loads: its weights layer by layer, its KV cache and
its compute buffer, from the GGUF header alone (issue 12: fit both models to device memory).

Weights and KV cache are exact arithmetic on the header. The compute buffer is a fit to what
llama.cpp (llama-cpp-python 0.3.36) logs as `CPU compute buffer size` with specrun's context
(n_batch = n_ubatch, one sequence, flash attention `auto`, which the log resolves to "Flash
Attention enabled"), measured on SmolLM2-135M F16 and Q4_0, Gemma3-270M Q4_K_M and F32 llamas
written with n_embd 64..2048 and n_ff 128..5632, at n_ctx 256..8192 and n_ubatch 32..512:

- It grows linearly with n_ubatch (the reserved graph makes every token of a ubatch an output).
- It is the larger of two phases of the graph, as the allocator reuses the first's memory in
  the second:
  output: the f32 logits (n_vocab a token) and the last hidden state and its norm (2 n_embd f32).
      SmolLM2 98.25 MiB = 512 * (4*49152 + 8*576); Gemma3 514.5 MiB = 512 * (4*262144 + 8*640).
  layers: the f16 attention mask (n_ctx a token), the FFN's gate, up and their product
      (3 n_ff f32) and four hidden-sized f32 tensors (residual, norm, FFN input and output).
      n_embd 2048, n_ff 5632 at n_ctx 4096: 53.01 MiB = 512 * (2*4096 + 12*5632 + 16*2048 + 28).
  Both agree with the log to 28 bytes a token (positions, output ids) wherever n_ff >= 2 n_embd.
- Off by the allocator's packing elsewhere: SmolLM2 at n_ctx 2048 takes 4% more (102.51 MiB),
  and models narrower than real ones (n_ff <= 2 n_embd) within 20% either way.
Without flash attention (`--flash-attn off`) the layers hold each head's f32 attention scores
besides the mask, n_ctx*n_head a token: SmolLM2 at n_ctx 8192, 165.5 MiB against 166.38 logged
(at 4096 and below its output phase is the larger, as with flash attention).

The KV cache counts the chosen types (`Tuning.cache`: q8_0 stores 32 values in 34 bytes),
and a context past the trained one where RoPE scaling reaches it (`Rope.reach`), as the
runtime gives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType

from specrun.llama.gguf import tensor_bytes, tensors_and_metadata
from specrun.llama.tuning import CacheTypes, Tuning, row_bytes

Tensor = tuple[str, str, tuple[int, ...]]  # name, ggml type name, shape (ne0 first)

F32, F16 = 4, 2  # bytes per value: activations are f32, the attention mask f16


@dataclass(frozen=True)
class Footprint:
    name: str  # file name
    n_layer: int  # repeating layers (block_count)
    layer_weights: tuple[int, ...]  # bytes of each repeating layer's tensors (blk.N.*), index N
    # token_embd and whatever else is outside the blocks and the output: kept in host memory
    input_weights: int
    output_weights: (
        int  # output_norm + output (absent when tied): offloaded when n_gpu_layers > n_layer
    )
    kv_per_layer: int  # bytes of one layer's K and V cache at the chosen context and types
    compute: int  # compute buffer bytes at the chosen context and n_ubatch

    @property
    def weights(self) -> int:
        return self.input_weights + sum(self.layer_weights) + self.output_weights

    @property
    def total(self) -> int:
        return self.weights + self.n_layer * self.kv_per_layer + self.compute

    def for_sequences(self, sequences: int) -> Footprint:
        """The same model with a KV cache of the chosen context for each of `sequences`
        (slots): one pool of them all."""
        return replace(self, kv_per_layer=self.kv_per_layer * sequences)


def estimate(
    path: Path | str, *, n_ctx: int, n_ubatch: int = 512, tuning: Tuning = Tuning()
) -> Footprint:
    tensors, meta = tensors_and_metadata(path)
    return footprint(
        tensors, meta, name=Path(path).name, n_ctx=n_ctx, n_ubatch=n_ubatch, tuning=tuning
    )


def footprint(
    tensors: list[Tensor],
    meta: dict[str, Any],
    *,
    name: str,
    n_ctx: int,
    n_ubatch: int = 512,
    tuning: Tuning = Tuning(),
) -> Footprint:
    arch = meta["general.architecture"]
    n_layer = int(meta[f"{arch}.block_count"])
    n_ctx = context_size(meta, n_ctx, tuning)
    layers = [0] * n_layer
    input_weights = output_weights = 0
    for tensor_name, type_name, shape in tensors:
        size = tensor_bytes(GGMLQuantizationType[type_name], shape)
        if tensor_name.startswith("blk."):
            layers[int(tensor_name.split(".")[1])] += size
        elif tensor_name.startswith("output"):
            output_weights += size
        else:
            input_weights += size
    return Footprint(
        name=name,
        n_layer=n_layer,
        layer_weights=tuple(layers),
        input_weights=input_weights,
        output_weights=output_weights,
        kv_per_layer=kv_bytes_per_layer(meta, n_ctx, tuning.cache),
        compute=compute_bytes(
            tensors, meta, n_ctx, n_ubatch, flash_attn=tuning.flash_attn != "off"
        ),
    )


def context_size(meta: dict[str, Any], n_ctx: int, tuning: Tuning = Tuning()) -> int:
    """Like llama.model.Model: no more context than the model reaches, its trained one
    unless RoPE scaling stretches it."""
    arch = meta["general.architecture"]
    trained = meta.get(f"{arch}.context_length")
    if trained is None:
        return n_ctx
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    reach = tuning.rope.reach(int(trained), int(original) if original else None)
    return n_ctx if reach is None else min(n_ctx, reach)


def head_sizes(meta: dict[str, Any]) -> tuple[int, int, int, int]:
    """Attention heads, KV heads, and the values of a head in K and in V."""
    arch = meta["general.architecture"]
    n_embd: int = meta[f"{arch}.embedding_length"]
    n_head = _largest(meta[f"{arch}.attention.head_count"])
    n_head_kv = _largest(meta.get(f"{arch}.attention.head_count_kv", n_head))
    head_dim_k: int = meta.get(f"{arch}.attention.key_length", n_embd // n_head)
    head_dim_v: int = meta.get(f"{arch}.attention.value_length", n_embd // n_head)
    return n_head, n_head_kv, head_dim_k, head_dim_v


def kv_bytes_per_layer(meta: dict[str, Any], n_ctx: int, cache: CacheTypes = CacheTypes()) -> int:
    """A layer's K and V rows (all KV heads of a position) at their types, a row a position."""
    _, n_head_kv, head_dim_k, head_dim_v = head_sizes(meta)
    row = row_bytes(cache.k, n_head_kv * head_dim_k) + row_bytes(cache.v, n_head_kv * head_dim_v)
    return n_ctx * row


def compute_bytes(
    tensors: list[Tensor],
    meta: dict[str, Any],
    n_ctx: int,
    n_ubatch: int,
    *,
    flash_attn: bool = True,
) -> int:
    """The fit in the module docstring: per token, the larger of the output and the layer phases."""
    arch = meta["general.architecture"]
    n_embd: int = meta[f"{arch}.embedding_length"]
    n_ff = _largest(meta.get(f"{arch}.feed_forward_length", 0))
    n_vocab = _vocabulary_size(tensors)
    n_tokens = min(n_ubatch, n_ctx)  # llama.cpp caps the batch at the context
    output_phase = F32 * n_vocab + 2 * F32 * n_embd
    # Flash attention reads the f16 mask alone; without it each head's f32 scores are a tensor.
    scores = 0 if flash_attn else F32 * n_ctx * head_sizes(meta)[0]
    layer_phase = F16 * n_ctx + scores + 3 * F32 * n_ff + 4 * F32 * n_embd
    return n_tokens * max(output_phase, layer_phase)


def _vocabulary_size(tensors: list[Tensor]) -> int:
    """The rows of the token embedding: the logits' width."""
    return next(shape[1] for name, _, shape in tensors if name == "token_embd.weight")


def _largest(value: int | Sequence[int]) -> int:
    """Per-layer values (an array in some architectures) counted at their largest."""
    return max(value) if isinstance(value, Sequence) else int(value)
