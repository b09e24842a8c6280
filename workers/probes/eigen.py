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

import math

import numpy as np
import torch
from torch import Tensor


def _flat(ts: list[Tensor], out: Tensor | None = None) -> Tensor:
    return torch.cat([t.detach().reshape(-1) for t in ts], out=out)


def _split(flat: Tensor, like: list[Tensor]) -> list[Tensor]:
    """Views of a flat vector shaped like `like` (the product sees the parameters' shapes)."""
    return [c.view(t.shape) for c, t in zip(flat.split([t.numel() for t in like]), like, strict=True)]


def _top_ritz(alphas: list[float], betas: list[float]) -> tuple[float, np.ndarray]:
    """(largest eigenvalue, its unit eigenvector) of the symmetric tridiagonal matrix (α on the diagonal)."""
    tri = np.diag(np.asarray(alphas, dtype=np.float64))
    if betas:
        off = np.asarray(betas, dtype=np.float64)
        tri += np.diag(off, 1) + np.diag(off, -1)
    values, vectors = np.linalg.eigh(tri)
    return float(values[-1]), vectors[:, -1]


def lanczos_top(
    product, init: list[Tensor], products: int, tol: float | None = None, max_products: int | None = None
) -> tuple[float, list[Tensor], dict]:
    """(θ ≈ λ_max, its Ritz vector, {"products", "residual"}) — `products` at least, then to `tol`.

    The Krylov basis is kept as the rows of one matrix over the flattened parameters, and each product is
    written straight into the next row, so a small model's few products are not outweighed by
    bookkeeping: one matrix-vector product gives the new vector's coefficients on the basis and its own
    squared norm, one more removes its projection."""
    start = _flat(init)
    norm = float(start.norm())
    if norm == 0.0:
        raise ValueError("lanczos_top needs a nonzero start vector")
    limit = max(products, max_products or products) if tol is not None else products
    basis = torch.empty((limit + 1, start.numel()), dtype=start.dtype, device=start.device)
    torch.div(start, norm, out=basis[0])
    alphas: list[float] = []
    betas: list[float] = []
    theta, s, residual, previous = 0.0, np.ones(1), math.inf, None
    for k in range(limit):
        w = basis[k + 1]  # F q_k lands in the next row and is orthogonalized there
        _flat(product(_split(basis[k], init)), out=w)
        seen = basis[: k + 1]
        dots = (basis[: k + 2] @ w).tolist()  # q_j · w for j ≤ k, then ‖w‖²
        alphas.append(dots[k])
        coeffs = torch.tensor(dots[:-1], dtype=w.dtype, device=w.device)
        w.addmv_(seen.t(), coeffs, alpha=-1.0)  # full re-orthogonalization (covers α q_k and β q_{k-1})
        beta = float(w.norm())
        if beta < 0.5 * math.sqrt(max(dots[-1], 0.0)):  # much cancelled: once more ("twice is enough")
            w.addmv_(seen.t(), seen @ w, alpha=-1.0)
            beta = float(w.norm())
        theta, s = _top_ritz(alphas, betas)
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
        w.div_(beta)
    ritz = torch.from_numpy(s).to(basis.dtype).to(basis.device) @ basis[: len(alphas)]
    return (
        theta,
        _split(ritz, init),
        {"products": len(alphas), "residual": residual / max(abs(theta), 1e-30)},
    )
