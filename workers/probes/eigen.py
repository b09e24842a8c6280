"""`lanczos_top(product, init, ...)`: the largest eigenvalue of a symmetric PSD operator, few products.

Lanczos keeps every direction it has seen (the Krylov space of `init`), so after k products its top Ritz
value is at least the Rayleigh quotient that k steps of power iteration reach from the same start, and
it converges much faster when the spectrum has a few outliers (as Fisher spectra do). A warm start from
the previous estimate's Ritz vector needs ~2 products. A cold start iterates until the Ritz residual
‖F y − θ y‖ ≤ tol · θ (an eigenvalue lies within that distance of θ) or the relative change of θ
between two products is below tol / 10, or `max_products` is reached; the residual is reported.
The basis is fully re-orthogonalized (it has at most a dozen vectors): classical Gram–Schmidt, repeated
when it cancelled most of the vector.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _flat(ts: list[Tensor]) -> Tensor:
    return torch.cat([t.detach().reshape(-1) for t in ts])


def _split(flat: Tensor, like: list[Tensor]) -> list[Tensor]:
    """Views of a flat vector shaped like `like` (the product sees the parameters' shapes)."""
    return [c.view_as(t) for c, t in zip(flat.split([t.numel() for t in like]), like, strict=True)]


def lanczos_top(
    product, init: list[Tensor], products: int, tol: float | None = None, max_products: int | None = None
) -> tuple[float, list[Tensor], dict]:
    """(θ ≈ λ_max, its Ritz vector, {"products", "residual"}) — `products` at least, then to `tol`.

    The Krylov basis is kept as the rows of one matrix over the flattened parameters, so a small model's
    few products are not outweighed by per-tensor bookkeeping (one dot or re-orthogonalization is a single
    matrix product, not one per parameter tensor)."""
    start = _flat(init)
    norm = float(start.norm())
    if norm == 0.0:
        raise ValueError("lanczos_top needs a nonzero start vector")
    limit = max(products, max_products or products) if tol is not None else products
    basis = torch.empty((limit, start.numel()), dtype=start.dtype, device=start.device)
    basis[0] = start / norm
    alphas: list[float] = []
    betas: list[float] = []
    theta, s, residual, previous = 0.0, torch.ones(1, dtype=torch.float64), float("inf"), None
    for k in range(limit):
        w = _flat(product(_split(basis[k], init)))
        alphas.append(float(basis[k] @ w))
        seen = basis[: k + 1]
        before = float(w.norm())
        w -= seen.t() @ (seen @ w)  # full re-orthogonalization (covers the α q_k and β q_{k-1} terms)
        beta = float(w.norm())
        if beta < 0.5 * before:  # much cancelled: once more keeps the basis orthogonal ("twice is enough")
            w -= seen.t() @ (seen @ w)
            beta = float(w.norm())
        tri = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if betas:
            off = torch.tensor(betas, dtype=torch.float64)
            tri += torch.diag(off, 1) + torch.diag(off, -1)
        values, vectors = torch.linalg.eigh(tri)
        theta, s = float(values[-1]), vectors[:, -1]
        residual = beta * abs(float(s[-1]))
        done = k + 1 >= products and (
            tol is None
            or residual <= tol * abs(theta)
            or (previous is not None and abs(theta - previous) <= 0.1 * tol * abs(theta))
        )
        previous = theta
        if done or beta <= 1e-12 * max(abs(theta), 1e-30) or k + 1 == limit:
            break
        betas.append(beta)
        basis[k + 1] = w / beta
    vec = s.to(basis.dtype) @ basis[: len(alphas)]
    return (
        theta,
        [t.clone() for t in _split(vec, init)],
        {"products": len(alphas), "residual": residual / max(abs(theta), 1e-30)},
    )
