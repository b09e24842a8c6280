"""Tiny float64 networks, one per normalizer, built from the engine's modules, with brute-force Fisher."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, jacrev

from workers.engine.norms import make_linear
from workers.probes.likelihood import Likelihood

NORMS = ["none", "layer", "batch", "weight", "rms"]


class TinyMLP(nn.Module):
    """in → hidden (normalized) → tanh → hidden (normalized) → tanh → logits (plain Linear)."""

    def __init__(self, norm: str, d_in: int = 3, hidden: int = 4, d_out: int = 3):
        super().__init__()
        self.l1 = make_linear(norm, d_in, hidden)
        self.l2 = make_linear(norm, hidden, hidden)
        self.out = nn.Linear(hidden, d_out)
        self.capture = False
        self.captured: dict = {}

    def forward(self, x):
        return self.out(torch.tanh(self.l2(torch.tanh(self.l1(x)))))


def tiny(norm: str, seed: int = 0, batch: int = 6):
    torch.manual_seed(seed)
    model = TinyMLP(norm).double().train()
    with torch.no_grad():  # non-trivial gains and biases, so no symmetry hides a bug
        for name, p in model.named_parameters():
            if name.endswith(("gain", ".g")):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("bias", ".b")):
                p.uniform_(-0.3, 0.3)
    x = torch.randn(batch, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (batch,))
    return model, x, y


def brute_fisher(model, x, y):
    """(F = (1/N) Σ_k Σ_c p_kc g_kc g_kcᵀ, JᵀΛJ/N via jacrev, parameter names, sizes) in float64."""
    names = [n for n, p in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    lik = Likelihood("class")

    def unflat(t):
        return {n: c.reshape(s) for n, c, s in zip(names, t.split(sizes), shapes, strict=True)}

    def pred(t):
        out = functional_call(model, ({**unflat(t)}, {n: b.clone() for n, b in buffers.items()}), (x,))
        return lik.select(out, y)[0]

    logits = pred(theta).detach()
    n, c = logits.shape
    p = torch.softmax(logits, -1)
    fisher = torch.zeros(theta.numel(), theta.numel(), dtype=theta.dtype)
    for k in range(n):
        for cls in range(c):
            t = theta.clone().requires_grad_(True)
            logp = torch.log_softmax(pred(t), -1)[k, cls]
            (g,) = torch.autograd.grad(logp, t)
            fisher += p[k, cls] * torch.outer(g, g)
    fisher /= n
    jac = jacrev(pred)(theta)  # (N, C, P)
    lam = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    ggn = torch.einsum("kcp,kcd,kdq->pq", jac, lam, jac) / n
    return fisher, ggn, names, sizes


@pytest.fixture(params=NORMS)
def norm(request):
    return request.param
