"""`lanczos_top(product, init, ...)`: the largest eigenvalue of a symmetric operator, to a stated tolerance.

Lanczos keeps every direction it has seen (the Krylov space of `init`), so after k products its top Ritz
value is at least the Rayleigh quotient that k steps of power iteration reach from the same start, and
it converges much faster when the spectrum has a few outliers (as Fisher spectra do).

The bound. The top Ritz value θ is a Rayleigh quotient, so θ ≤ λ_max always (for any symmetric operator,
the Hessian included). Its Ritz vector y has the residual r = ‖A y − θ y‖ = β_k |s_k| (the last Lanczos
coefficient times the last entry of the tridiagonal matrix's top eigenvector), and some eigenvalue of A
lies in [θ − r, θ + r]. When that eigenvalue is λ_max — the Krylov space holds the top direction, which a
start with any component along it gives — then θ ≤ λ_max ≤ θ + r, and (λ_max − θ)/λ_max ≤ r/θ. With `tol`
the iteration goes on until r ≤ tol·|θ| (then `converged`), or stops at `max_products` with the bound it
reached: the value is then a lower bound, and r/θ says how far below λ_max it may be.
A Fisher-vector product is a Jacobian-vector product J q and a vjp Jᵀ(Λ J q); the last Krylov vector
needs only qᵀFq = (Jq)ᵀΛ(Jq)/N, so given `quadratic` the last vjp is skipped at the cap (θ is still the
top Ritz value of the whole Krylov space; its bound is the one after the last full product: θ only grows).
The basis is fully re-orthogonalized: classical Gram–Schmidt, repeated when it cancelled most of the vector.
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
    (and even its array constructor) costs more than the whole solve inside an estimate, where its code
    is cold.

    Two vectors: closed form. More: Newton on the characteristic polynomial, kept in a Sturm-count
    bracket (`_largest`), then two steps of inverse iteration (a tridiagonal solve) for the vector."""
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
    theta = _largest(alphas, betas, lo, hi, tiny)
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


def _largest(alphas: list[float], betas: list[float], lo: float, hi: float, tiny: float) -> float:
    """The largest eigenvalue in [lo, hi] of the symmetric tridiagonal matrix, to the last bits.

    Newton on its characteristic polynomial p from hi (above every root, the iterates fall monotonically
    onto the largest, in far fewer steps than bisection to the last bits), the LDLᵀ pivots d_i of T − x I
    giving both p'/p = Σ d_i'/d_i and, by their signs, how many eigenvalues lie below x (the Sturm count),
    which keeps [lo, hi] around the largest: a step that would leave it bisects instead."""
    k = len(alphas)
    sq = [b * b for b in betas[: k - 1]]
    x = hi
    for _ in range(300):
        below, d, dd, ratio = 0, 1.0, 0.0, 0.0
        for i in range(k):
            if i:
                dd = sq[i - 1] * dd / (d * d) - 1.0
                d = alphas[i] - x - sq[i - 1] / d
            else:
                d, dd = alphas[0] - x, -1.0
            if d == 0.0:
                d = -tiny
            below += d < 0.0
            ratio += dd / d
        if below == k:
            hi = x  # every eigenvalue lies below x
        else:
            lo = x
        finite = ratio != 0.0 and math.isfinite(ratio)  # a pivot at zero: bisect this once
        nxt = x - 1.0 / ratio if finite else 0.5 * (lo + hi)  # Newton: x − p/p'
        if nxt == x and finite:
            return x
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
            if not lo < nxt < hi:  # the bracket is two neighbouring floats
                return hi
        x = nxt
    return hi


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
    """(θ ≤ λ_max, its Ritz vector, {"products", "residual", "converged"}) — `products` at least, then
    until the relative residual r/|θ| ≤ `tol` or `max_products` (see the module docstring for the bound).

    `products` counts Krylov vectors. `start_product` = F·init when the caller has it already (the first
    product is then free); `quadratic(q)` = qᵀFq for a unit q, which the last Krylov vector at the cap
    needs alone (a Fisher-vector product's Jacobian-vector half, without the vjp that only the next vector
    would use). "residual" is r/|θ|, after the last full product; "converged" whether it is ≤ `tol`.

    The Krylov basis is kept as the rows of one matrix over the flattened parameters, and each product is
    written straight into the next row, so a small model's few products are not outweighed by
    bookkeeping: one matrix-vector product gives the new vector's coefficients on the basis and its own
    squared norm, one more removes its projection. `workspace` (a dict the caller keeps between calls)
    holds that matrix: a fresh megabyte costs its page faults again at every estimate."""
    limit = max(products, max_products or products) if tol is not None else products
    first = init[0]
    size = sum(t.numel() for t in init)
    shapes = [t.shape for t in init]
    space = workspace if workspace is not None else {}
    basis = space.get("basis")
    if basis is None or basis.shape[0] < limit + 1 or basis.shape[1] != size or basis.dtype != first.dtype:
        basis = space["basis"] = torch.empty((limit + 1, size), dtype=first.dtype, device=first.device)
        space["rows"] = None
    if space.get("rows") is None or space.get("shapes") != shapes:  # each row as the parameters' shapes
        space["rows"], space["shapes"] = [_split(row, init) for row in basis], shapes
    rows = space["rows"]
    torch._foreach_copy_(rows[0], [t.detach() for t in init])
    norm = _norm(basis[0])
    if norm == 0.0:
        raise ValueError("lanczos_top needs a nonzero start vector")
    basis[0].div_(norm)
    alphas: list[float] = []
    betas: list[float] = []
    theta, s, residual, ritz_at = 0.0, [1.0], math.inf, 0
    for k in range(limit):
        if quadratic is not None and k + 1 == limit:  # the last vector: its Rayleigh quotient is enough
            alphas.append(float(quadratic(rows[k])))
            break
        w = basis[k + 1]  # F q_k lands in the next row and is orthogonalized there
        if k == 0 and start_product is not None:
            torch._foreach_copy_(rows[1], start_product)
            w.div_(norm)
        else:
            torch._foreach_copy_(rows[k + 1], product(rows[k]))
        seen = basis[: k + 1]
        products_t = basis[: k + 2] @ w  # q_j · w for j ≤ k, then ‖w‖²
        dots = products_t.tolist()
        alphas.append(dots[k])
        w.addmv_(seen.t(), products_t[:-1], alpha=-1.0)  # full re-orthogonalization (α q_k and β q_{k-1})
        left = dots[-1] - sum(d * d for d in dots[:-1])  # ‖w‖² after: Pythagoras (q_j orthonormal)
        if left < 0.25 * max(dots[-1], 0.0):  # much cancelled: once more ("twice is enough"), measured
            w.addmv_(seen.t(), seen @ w, alpha=-1.0)
            beta = _norm(w)
        else:
            beta = math.sqrt(left)
        # an invariant subspace (β ≈ 0): θ is an eigenvalue, r = 0
        stop = k + 1 == limit or beta <= 1e-12 * max(max(abs(a) for a in alphas), 1e-30)
        check = tol is not None and k + 1 >= products
        if check or stop:  # the Ritz pair now (else only at the end: its value is not needed before)
            theta, s = _top_ritz(alphas, betas)
            residual, ritz_at = beta * abs(float(s[-1])), len(alphas)
            if stop or (tol is not None and residual <= tol * abs(theta)):
                break
        betas.append(beta)
        w.div_(beta)
    if ritz_at != len(alphas):
        full = len(betas)  # vectors whose full product was taken (the last one's residual is reported)
        if ritz_at != full and full:
            s_full = _top_ritz(alphas[:full], betas[: full - 1])[1]
            residual = betas[full - 1] * abs(float(s_full[-1]))
        theta, s = _top_ritz(alphas, betas[: len(alphas) - 1])
    m = len(alphas)
    if m > 2:  # Σ_j s_j q_j, a vector the basis does not share: one pass over the rows
        ritz = torch.mv(basis[:m].t(), torch.tensor(s, dtype=basis.dtype, device=basis.device))
    else:
        ritz = basis[0] * s[0]
        if m == 2:
            ritz.add_(basis[1], alpha=s[1])
    relative = residual / max(abs(theta), 1e-30)
    return (
        theta,
        _split(ritz, init),
        {"products": m, "residual": relative, "converged": tol is not None and relative <= tol},
    )
