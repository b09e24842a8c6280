"""A tiny Transformer encoder with LayerNorm before (pre-LN) or after (post-LN) each residual sublayer.

Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture": in the original post-LN
block the normalizer sits after the residual sum, x_{l+1} = LN(x_l + F(x_l)); pre-LN moves it inside
the branch, x_{l+1} = x_l + F(LN(x_l)), and normalizes the last block's output once more. At
initialisation post-LN's gradients are largest at the layers next to the output, so without a learning
rate warm-up Adam's first steps there are too large; pre-LN's are even across depth and it trains
without warm-up.

Block (d = model width, h heads, d_ff = 4d, no dropout):
    post: x = LN₁(x + Attn(x));      x = LN₂(x + FFN(x))
    pre:  x = x + Attn(LN₁(x));      x = x + FFN(LN₂(x))        (and LN_f on the last block's output)
Attn is multi-head softmax(QKᵀ/√(d/h))V over all positions (an encoder: no causal mask), then a linear
map; FFN(x) = W₂ ReLU(W₁x + b₁) + b₂. Tokens enter through a learned embedding plus a learned position
embedding; a plain linear head gives per-position logits. Every LayerNorm is the engine's (the
normalizer factory's module), so it runs through the same kernels as the other models.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workers.engine.norms import make_normalizer

POSITIONS = ("pre", "post")


class SelfAttention(nn.Module):
    """Multi-head self-attention over all positions: `qkv` (d → 3d) and `out` (d → d)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        if d % heads:
            raise ValueError(f"the width {d} must be a multiple of the {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mixed = F.scaled_dot_product_attention(q, k, v)  # softmax(q kᵀ / √(d/h)) v per head
        return self.out(mixed.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """One encoder block: attention and a ReLU feed-forward net, each a residual branch with its LN."""

    def __init__(self, d: int, heads: int, norm: str, position: str, gain_init: float = 1.0):
        super().__init__()
        if position not in POSITIONS:
            raise ValueError(f"position must be one of {', '.join(POSITIONS)}, not {position!r}")
        self.position = position
        self.attn = SelfAttention(d, heads)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.norm1 = make_normalizer(norm, d, gain_init)
        self.norm2 = make_normalizer(norm, d, gain_init)

    @staticmethod
    def _norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return norm(x.reshape(-1, x.shape[-1])).view_as(x)  # per position: a (cases, d) matrix

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.position == "post":
            x = self._norm(self.norm1, x + self.attn(x))
            return self._norm(self.norm2, x + self.ff(x))
        x = x + self.attn(self._norm(self.norm1, x))
        return x + self.ff(self._norm(self.norm2, x))


class Transformer(nn.Module):
    """Token ids (B, T) → per-position logits (B, T, vocab) through `blocks` (pre- or post-LN)."""

    def __init__(
        self,
        vocab: int,
        seq_len: int,
        d: int,
        layers: int,
        heads: int,
        norm: str = "layer",
        position: str = "pre",
        gain_init: float = 1.0,
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.empty(seq_len, d))
        nn.init.normal_(self.embed.weight, std=1 / math.sqrt(d))
        nn.init.normal_(self.pos, std=1 / math.sqrt(d))
        self.blocks = nn.ModuleList(Block(d, heads, norm, position, gain_init) for _ in range(layers))
        self.final_norm = make_normalizer(norm, d, gain_init) if position == "pre" else None
        self.head = nn.Linear(d, vocab)
        self.capture = False
        self.captured: dict[str, Any] = {}  # the engine's capture protocol (workers/engine/models.py)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        if self.final_norm is not None:
            x = Block._norm(self.final_norm, x)
        return self.head(x)

    def layer_grad_norms(self) -> list[float]:
        """‖∂ℓ/∂W‖_F over each block's weight matrices (attention and feed-forward, biases and
        normalizer gains left out), from the gradients now in `.grad`, first block first."""
        out = []
        for block in self.blocks:
            assert isinstance(block, Block)
            total = 0.0
            for m in (block.attn.qkv, block.attn.out, block.ff[0], block.ff[2]):
                assert isinstance(m, nn.Linear)
                g = m.weight.grad
                if g is not None:
                    total += float(g.double().pow(2).sum())
            out.append(math.sqrt(total))
        return out
