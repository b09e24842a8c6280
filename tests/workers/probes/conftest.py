"""Tiny float64 networks, one per normalizer, built from the engine's modules, with brute-force Fisher."""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, jacrev

from workers.engine.models import MLP, RecurrentNet
from workers.probes.likelihood import Likelihood

NORMS = ["none", "layer", "batch", "weight", "rms"]


def tiny(norm: str, seed: int = 0, batch: int = 6):
    """The engine's MLP 3 → 4 → 4 → 3 in float64, train mode, with non-trivial gains and biases."""
    torch.manual_seed(seed)
    model = MLP(3, 4, 2, 3, norm).double().train()
    _perturb(model)
    x = torch.randn(batch, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (batch,))
    return model, x, y


def tiny_rnn(norm: str, cell: str = "lstm", seed: int = 0, batch: int = 4, steps: int = 5):
    """The engine's RecurrentNet (2 → 3 hidden, 3 classes read at the last step) in float64."""
    torch.manual_seed(seed)
    model = RecurrentNet(2, 3, 1, 3, cell, norm, max_steps=steps).double().train()
    _perturb(model)
    x = torch.randn(batch, steps, 2, dtype=torch.float64)
    y = torch.randint(0, 3, (batch,))
    return model, x, y


def _perturb(model):
    with torch.no_grad():  # non-trivial gains and biases, so no symmetry hides a bug
        for name, p in model.named_parameters():
            if name.endswith(("gain", ".g")):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("bias", ".b")):
                p.uniform_(-0.3, 0.3)


def brute_fisher(model, x, y):
    """(F = (1/N) Σ_k Σ_c p_kc g_kc g_kcᵀ, JᵀΛJ/N, parameter names, sizes) in float64.

    J comes from torch.func.jacrev for feed-forward nets; recurrent nets record hidden states with
    retain_grad (unsupported under functorch), so there J is built row by row with autograd."""
    names = [n for n, p in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for _, p in model.named_parameters()])
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    model.capture = True  # recurrent nets: the step-by-step path (the fused one has no double backward)
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
    if hasattr(model, "rnn"):
        t = theta.clone().requires_grad_(True)
        out = pred(t)
        jac = torch.stack(
            [
                torch.stack([torch.autograd.grad(out[k, cls], t, retain_graph=True)[0] for cls in range(c)])
                for k in range(n)
            ]
        )
    else:
        model.capture = False
        jac = jacrev(pred)(theta)  # (N, C, P)
    lam = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    ggn = torch.einsum("kcp,kcd,kdq->pq", jac, lam, jac) / n
    return fisher, ggn, names, sizes


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny float64 nets: one thread is fastest, and CI's 2 cores are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=NORMS)
def norm(request):
    return request.param
