"""The EAGLE-3 head in torch, computed as llama.cpp's `eagle3` graph computes it.

Encoder: g = fc(f), f the target's three layer inputs side by side. Decoder, one layer:
attention over [rms(embed(token)), rms(g)] (2 * n_embd wide) with RoPE of llama.cpp's
NORM kind (adjacent pairs rotated) and the residual taken from g, then a SiLU-gated FFN;
its output (before the final norm) is the state the head feeds itself next, and the final
norm and `lm_head` give logits over the draft vocabulary, whose entries `d2t` maps to
the target's token ids. The token embeddings are the target's, frozen (the exported head
borrows them from the target at run time).

Training-time test (EAGLE-3): step 0 reads the target's states at every position; step k
reads the head's own output of step k - 1 and the token k positions further on, as
drafting does. A chain rooted at position P attends to the target-fed keys of positions
up to P and to its own keys of the steps before (the head's cache while it drafts).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from specrun.training.gguf_io import HeadShape


class RmsNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """llama.cpp's NORM RoPE: pairs (2i, 2i + 1) turned by position * base^(-2i / dim).
    x [..., n, heads, dim], positions [..., n]."""
    dim = x.shape[-1]
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=x.device) / dim)
    angle = positions.to(torch.float32)[..., None, None] * freq  # [..., n, 1, dim / 2]
    cos, sin = angle.cos(), angle.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Eagle3Head(nn.Module):
    embeddings: Tensor

    def __init__(self, shape: HeadShape, embeddings: Tensor) -> None:
        super().__init__()
        self.shape = shape
        d, hd = shape.n_embd, shape.head_dim
        self.register_buffer("embeddings", embeddings, persistent=False)  # the target's, frozen
        self.fc = nn.Linear(3 * embeddings.shape[1], d, bias=False)
        self.attn_norm = RmsNorm(d, shape.eps)
        self.hidden_norm = RmsNorm(d, shape.eps)
        self.q = nn.Linear(2 * d, shape.n_head * hd, bias=False)
        self.k = nn.Linear(2 * d, shape.n_head_kv * hd, bias=False)
        self.v = nn.Linear(2 * d, shape.n_head_kv * hd, bias=False)
        self.o = nn.Linear(shape.n_head * hd, d, bias=False)
        self.ffn_norm = RmsNorm(d, shape.eps)
        self.gate = nn.Linear(d, shape.n_ff, bias=False)
        self.up = nn.Linear(d, shape.n_ff, bias=False)
        self.down = nn.Linear(shape.n_ff, d, bias=False)
        self.output_norm = RmsNorm(d, shape.eps)
        self.lm_head = nn.Linear(d, shape.draft_vocab, bias=False)
        for linear in (self.fc, self.q, self.k, self.v, self.gate, self.up):
            nn.init.normal_(linear.weight, std=1 / math.sqrt(linear.in_features))
        for linear in (self.o, self.down):  # the residual carries g at first
            nn.init.normal_(linear.weight, std=0.1 / math.sqrt(linear.in_features))

    def _qkv(self, tokens: Tensor, state: Tensor, positions: Tensor) -> tuple[Tensor, ...]:
        """Queries, keys and values [b, heads, n, dim] of the pairs (tokens, state)."""
        shape = self.shape
        x = torch.cat((self.attn_norm(self.embeddings[tokens]), self.hidden_norm(state)), -1)
        b, n = tokens.shape
        q = self.q(x).view(b, n, shape.n_head, shape.head_dim)
        k = self.k(x).view(b, n, shape.n_head_kv, shape.head_dim)
        v = self.v(x).view(b, n, shape.n_head_kv, shape.head_dim)
        q, k = rope(q, positions, shape.rope_base), rope(k, positions, shape.rope_base)
        group = shape.n_head // shape.n_head_kv
        k, v = (t.repeat_interleave(group, dim=2).transpose(1, 2) for t in (k, v))
        return q.transpose(1, 2), k, v

    def _finish(self, attended: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """The layer's output state and the draft logits, from attention's output [b, n, d]."""
        hidden = self.o(attended) + state
        normed = self.ffn_norm(hidden)
        hidden = self.down(F.silu(self.gate(normed)) * self.up(normed)) + hidden
        return hidden, self.lm_head(self.output_norm(hidden))

    def unroll(self, tokens: Tensor, features: Tensor, steps: int) -> list[Tensor]:
        """Draft logits of `steps` unrolled steps for every root P of each row.

        tokens [b, n + steps]: the text; features [b, n, 3 * target_hidden]: the target's
        rows at positions 0..n-1. Step k's logits [b, n, draft_vocab] at root P predict
        token P + k + 2 from the pair (tokens[P + k + 1], the head's state after step k - 1
        of that chain, or g_P at step 0)."""
        b, n = features.shape[:2]
        scale = 1 / math.sqrt(self.shape.head_dim)
        roots = torch.arange(n, device=features.device)
        causal = roots[None, :] <= roots[:, None]  # [query root, key position]
        state = self.fc(features)
        q, k0, v0 = self._qkv(tokens[:, 1 : n + 1], state, roots.expand(b, n))
        own_keys: list[tuple[Tensor, Tensor]] = []
        outputs = []
        for step in range(steps):
            if step:
                q, k, v = self._qkv(tokens[:, step + 1 : step + 1 + n], state, roots + step)
                own_keys.append((k, v))
            shared = (q @ k0.transpose(-1, -2)) * scale  # [b, h, n, n]
            shared = shared.masked_fill(~causal, float("-inf"))
            diagonal = [(q * k).sum(-1, keepdim=True) * scale for k, _ in own_keys]
            weights = torch.softmax(torch.cat([shared, *diagonal], -1), -1)
            attended = weights[..., :n] @ v0
            for j, (_, v) in enumerate(own_keys):
                attended = attended + weights[..., n + j : n + j + 1] * v
            attended = attended.transpose(1, 2).reshape(b, n, -1)
            state, logits = self._finish(attended, state)
            outputs.append(logits)
        return outputs

    def gguf_tensors(self) -> dict[str, np.ndarray]:
        """The weights by the names llama.cpp's `eagle3` loader reads."""
        names = {
            "fc.weight": self.fc.weight,
            "blk.0.attn_norm.weight": self.attn_norm.weight,
            "blk.0.attn_norm_2.weight": self.hidden_norm.weight,
            "blk.0.attn_q.weight": self.q.weight,
            "blk.0.attn_k.weight": self.k.weight,
            "blk.0.attn_v.weight": self.v.weight,
            "blk.0.attn_output.weight": self.o.weight,
            "blk.0.ffn_norm.weight": self.ffn_norm.weight,
            "blk.0.ffn_gate.weight": self.gate.weight,
            "blk.0.ffn_up.weight": self.up.weight,
            "blk.0.ffn_down.weight": self.down.weight,
            "output_norm.weight": self.output_norm.weight,
            "output.weight": self.lm_head.weight,
        }
        return {name: tensor.detach().float().cpu().numpy() for name, tensor in names.items()}
