"""`DyT(features, gain_init)`: y = tanh(α x) · γ + β over the last dimension (Zhu et al. 2025,
"Transformers without Normalization"): one learnable scalar α (init 0.5), per-feature γ (init gain_init)
and β (init 0)."""

from __future__ import annotations

import torch
from torch import nn

ALPHA_INIT = 0.5  # the paper's default for non-LLM models


class DyT(nn.Module):
    normlab_norm = True  # watch() records it as a normalizer in a model of your own (docs/watch.md)

    def __init__(self, features: int, gain_init: float = 1.0, alpha_init: float = ALPHA_INIT):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.full((features,), float(gain_init)))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha * x) * self.weight + self.bias

    def normlab_saturated(self, x: torch.Tensor) -> torch.Tensor:
        """The share of units where tanh is saturated (|tanh(αx)| > 0.99), for watch()."""
        return (torch.tanh(self.alpha * x).abs() > 0.99).float().mean()
