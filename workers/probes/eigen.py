"""`lanczos_top(product, init, ...)`: the largest eigenvalue of a symmetric PSD operator, few products.

Lanczos keeps every direction it has seen (the Krylov space of `init`), so after k products its top Ritz
value is at least the Rayleigh quotient that k steps of power iteration reach from the same start, and
it converges much faster when the spectrum has a few outliers (as Fisher spectra do). A warm start from
the previous estimate's Ritz vector needs ~2 products. A cold start iterates until the Ritz residual
‖F y − θ y‖ ≤ tol · θ (an eigenvalue lies within that distance of θ) or the relative change of θ
between two products is below tol / 10, or `max_products` is reached; the residual is reported.
The basis is fully re-orthogonalized (it has at most a dozen vectors).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _dot(a: list[Tensor], b: list[Tensor]) -> float:
    return float(sum((x * y).sum() for x, y in zip(a, b, strict=True)))


def _axpy(alpha: float, x: list[Tensor], y: list[Tensor]) -> None:
    for a, b in zip(x, y, strict=True):
        b.add_(a, alpha=alpha)


def lanczos_top(product, init: list[Tensor], products: int, tol: float | None = None,
                max_products: int | None = None) -> tuple[float, list[Tensor], dict]:
    """(θ ≈ λ_max, its Ritz vector, {"products", "residual"}) — `products` at least, then to `tol`."""
    norm = _dot(init, init) ** 0.5
    if norm == 0.0:
        raise ValueError("lanczos_top needs a nonzero start vector")
    limit = max(products, max_products or products) if tol is not None else products
    basis = [[t.detach() / norm for t in init]]
    alphas: list[float] = []
    betas: list[float] = []
    theta, s, residual, previous = 0.0, torch.ones(1, dtype=torch.float64), float("inf"), None
    for k in range(limit):
        q = basis[-1]
        w = [t.detach().clone() for t in product(q)]
        alphas.append(_dot(q, w))
        for b in basis:  # full re-orthogonalization (covers the α q_k and β q_{k-1} terms)
            _axpy(-_dot(b, w), b, w)
        beta = _dot(w, w) ** 0.5
        tri = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if betas:
            off = torch.tensor(betas, dtype=torch.float64)
            tri += torch.diag(off, 1) + torch.diag(off, -1)
        values, vectors = torch.linalg.eigh(tri)
        theta, s = float(values[-1]), vectors[:, -1]
        residual = beta * abs(float(s[-1]))
        done = k + 1 >= products and (
            tol is None or residual <= tol * abs(theta)
            or (previous is not None and abs(theta - previous) <= 0.1 * tol * abs(theta)))
        previous = theta
        if done or beta <= 1e-12 * max(abs(theta), 1e-30) or k + 1 == limit:
            break
        betas.append(beta)
        basis.append([t / beta for t in w])
    vec = [torch.zeros_like(t) for t in basis[0]]
    for coef, b in zip(s.tolist(), basis, strict=False):
        _axpy(coef, b, vec)
    return theta, vec, {"products": len(alphas), "residual": residual / max(abs(theta), 1e-30)}
