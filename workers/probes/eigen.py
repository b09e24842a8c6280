"""`lanczos_top(product, init, ...)`: the largest eigenvalue of a symmetric PSD operator, few products.

Lanczos keeps every direction it has seen (the Krylov space of `init`), so after k products its top Ritz
value is at least the Rayleigh quotient that k steps of power iteration reach from the same start, and
it converges much faster when the spectrum has a few outliers (as Fisher spectra do). A warm start from
the previous estimate's Ritz vector needs ~2 products. A cold start iterates until the Ritz residual
‖F y − θ y‖ ≤ tol · θ (an eigenvalue lies within that distance of θ) or the relative change of θ
between two products is below tol / 10, or `max_products` is reached; the residual is reported.
A Fisher-vector product is a Jacobian-vector product J q and a vjp Jᵀ(Λ J q); the last Krylov vector
needs only qᵀFq = (Jq)ᵀΛ(Jq)/N, so given `quadratic` the last vjp is skipped (θ is still the top Ritz
value of the whole Krylov space, residual then known only up to the vector before it).
The basis is fully re-orthogonalized (it has at most a dozen vectors): classical Gram–Schmidt, repeated
when it cancelled most of the vector.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _flat(ts: list[Tensor], out: Tensor | None = None) -> Tensor:
    return torch.cat([t.detach().reshape(-1) for t in ts], out=out)


def _split(flat: Tensor, like: list[Tensor]) -> list[Tensor]:
    """Views of a flat vector shaped like `like` (the product sees the parameters' shapes)."""
    return [c.view(t.shape) for c, t in zip(flat.split([t.numel() for t in like]), like, strict=True)]


def _norm(v: Tensor) -> float:
    """‖v‖ of a flat vector (a dot product: a quarter of `Tensor.norm`'s time on 85 K floats)."""
    return math.sqrt(max(float(torch.dot(v, v)), 0.0))


def _top_ritz(alphas: list[float], betas: list[float]) -> tuple[float, list[float]]:
    """(largest eigenvalue, its unit eigenvector) of the symmetric tridiagonal matrix (α on the diagonal,
    β beside it), in plain Python: a Lanczos run has at most a handful of vectors, and numpy's `eigh`
    (and even its array constructor) cost 50-100 µs each inside an estimate, where its code is cold.

    Two vectors: closed form. More: bisection on the Sturm count to the last bit, then two steps of
    inverse iteration (a tridiagonal solve) for the vector."""
    k = len(alphas)
    if k == 1:
        return alphas[0], [1.0]
    if k == 2:  # closed form: the common warm case
        a, b, c = alphas[0], betas[0], alphas[1]
        top = 0.5 * (a + c) + math.hypot(0.5 * (a - c), b)
        vec = [b, top - a] if abs(top - a) >= abs(top - c) else [top - c, b]
        norm = math.hypot(vec[0], vec[1])
        return top, [vec[0] / norm, vec[1] / norm] if norm > 0 else [1.0, 0.0]
    off = [0.0, *(abs(b) for b in betas[: k - 1]), 0.0]  # |β| beside each diagonal entry
    lo = min(alphas[i] - off[i] - off[i + 1] for i in range(k))
    hi = max(alphas[i] + off[i] + off[i + 1] for i in range(k))  # Gershgorin: every eigenvalue in [lo, hi]
    tiny = 1e-300 + 1e-30 * max(abs(lo), abs(hi))
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        below, d = 0, 1.0  # eigenvalues below mid: negative pivots of LDLᵀ of T − mid I
        for i in range(k):
            d = alphas[i] - mid - (betas[i - 1] ** 2 / d if i else 0.0)
            if d == 0.0:
                d = -tiny
            below += d < 0.0
        if below == k:
            hi = mid
        else:
            lo = mid
    theta = hi
    shift = theta + 1e-10 * max(abs(theta), tiny)  # just above θ: (T − shift I) is invertible, θ dominant
    vec = [1.0] * k
    for _ in range(2):  # inverse iteration, the tridiagonal solve by elimination (Thomas)
        diag = [a - shift for a in alphas]
        rhs = list(vec)
        for i in range(1, k):
            m = betas[i - 1] / (diag[i - 1] if diag[i - 1] != 0.0 else -tiny)
            diag[i] -= m * betas[i - 1]
            rhs[i] -= m * rhs[i - 1]
        vec[k - 1] = rhs[k - 1] / (diag[k - 1] if diag[k - 1] != 0.0 else -tiny)
        for i in range(k - 2, -1, -1):
            vec[i] = (rhs[i] - betas[i] * vec[i + 1]) / (diag[i] if diag[i] != 0.0 else -tiny)
        norm = math.sqrt(sum(v * v for v in vec))
        vec = [v / norm for v in vec]
    return theta, vec


def lanczos_top(
    product,
    init: list[Tensor],
    products: int,
    tol: float | None = None,
    max_products: int | None = None,
    *,
    start_product: list[Tensor] | None = None,
    quadratic=None,
    workspace: dict | None = None,
) -> tuple[float, list[Tensor], dict]:
    """(θ ≈ λ_max, its Ritz vector, {"products", "residual"}) — `products` at least, then to `tol`.

    `products` counts Krylov vectors. `start_product` = F·init when the caller has it already (the first
    product is then free); `quadratic(q)` = qᵀFq for a unit q, which the last Krylov vector needs alone
    (a Fisher-vector product's Jacobian-vector half, without the vjp that only the next vector would
    use). With `quadratic` the reported residual is the one after the last full product.

    The Krylov basis is kept as the rows of one matrix over the flattened parameters, and each product is
    written straight into the next row, so a small model's few products are not outweighed by
    bookkeeping: one matrix-vector product gives the new vector's coefficients on the basis and its own
    squared norm, one more removes its projection. `workspace` (a dict the caller keeps between calls)
    holds that matrix: a fresh megabyte costs its page faults again at every estimate."""
    limit = max(products, max_products or products) if tol is not None else products
    first = init[0]
    size = sum(t.numel() for t in init)
    basis = workspace.get("basis") if workspace is not None else None
    if basis is None or basis.shape[0] < limit + 1 or basis.shape[1] != size or basis.dtype != first.dtype:
        basis = torch.empty((limit + 1, size), dtype=first.dtype, device=first.device)
        if workspace is not None:
            workspace["basis"] = basis
    _flat(init, out=basis[0])
    norm = _norm(basis[0])
    if norm == 0.0:
        raise ValueError("lanczos_top needs a nonzero start vector")
    basis[0].div_(norm)
    alphas: list[float] = []
    betas: list[float] = []
    theta, s, residual, previous = 0.0, [1.0], math.inf, None
    for k in range(limit):
        if quadratic is not None and k + 1 == limit:  # the last vector: its Rayleigh quotient is enough
            alphas.append(float(quadratic(_split(basis[k], init))))
            theta, s = _top_ritz(alphas, betas)
            break
        w = basis[k + 1]  # F q_k lands in the next row and is orthogonalized there
        if k == 0 and start_product is not None:
            _flat(start_product, out=w).div_(norm)
        else:
            _flat(product(_split(basis[k], init)), out=w)
        seen = basis[: k + 1]
        products_t = basis[: k + 2] @ w  # q_j · w for j ≤ k, then ‖w‖²
        dots = products_t.tolist()
        alphas.append(dots[k])
        w.addmv_(seen.t(), products_t[:-1], alpha=-1.0)  # full re-orthogonalization (α q_k and β q_{k-1})
        beta = _norm(w)
        if beta < 0.5 * math.sqrt(max(dots[-1], 0.0)):  # much cancelled: once more ("twice is enough")
            w.addmv_(seen.t(), seen @ w, alpha=-1.0)
            beta = _norm(w)
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
    ritz = basis[0] * s[0]  # Σ_j s_j q_j, a vector the basis does not share
    for j in range(1, len(alphas)):
        ritz.add_(basis[j], alpha=s[j])
    return (
        theta,
        _split(ritz, init),
        {"products": len(alphas), "residual": residual / max(abs(theta), 1e-30)},
    )
