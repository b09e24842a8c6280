"""A cold λ_max(F) start from the output layer's own Fisher block, found without a Fisher-vector product.

When the scored predictions are a Linear layer's outputs, o_n = W h_n + b, that layer's block of
F = (1/N) Jᵀ Λ J is (1/N) Σ_n Λ_n ⊗ h̃_n h̃_nᵀ with h̃ = [h; 1]. In the predictions' space it acts as
x ↦ K Λ x with the N×N kernel K = H̃H̃ᵀ: a few power iterations there (N×C numbers, no autograd) give
its top direction x, hence the start q0 = J_outᵀ Λ x (zero outside the output layer) and J q0 = K Λ x,
so that F q0 = Jᵀ Λ J q0 / N costs a single vjp. A warm start combines it with the previous estimate's
Ritz vector p (Rayleigh–Ritz on span{p, q0}: one Jacobian-vector product J p, the rest is free), so a
top direction that rotated since the previous estimate is still found. The top eigenvector of F leans
on the output layer's block (its class directions): from q0, Lanczos gets closer in as many products
as from the sampled-label gradient ∇S, and warm estimates tens of steps apart stay close to the
converged λ_max instead of far below it (`normlab bench probes --accuracy` measures how close).

Recurrent models (their predictions a slice of a sequence's outputs) and per-step targets do not
qualify: their top direction lies in the recurrent weights, and `CurvatureProbe` starts them from the
sampled-label gradient ∇S instead.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

ITERATIONS = (
    12  # power iterations on the output-layer block (N×C numbers each; half as many leave warm λ_max off)
)


def output_layer_start(fp) -> tuple[dict[str, Tensor], Tensor] | None:
    """({parameter name: q0's part} (q0 is zero elsewhere), J q0), or None when the predictions are not a
    Linear layer's outputs."""
    found = fp.output_layer()
    if found is None:
        return None
    name, h = found
    module = fp.layout.modules[name]
    w_name, b_name = f"{name}.weight" if name else "weight", f"{name}.bias" if name else "bias"
    if w_name not in fp.names:
        return None
    with torch.no_grad():
        has_bias = b_name in fp.names and module.bias is not None
        pred = fp.pred.detach()
        probs = None if fp.lik.gaussian else fp.probs

        # Λ v per prediction: Likelihood.lam inlined on the pass's one softmax (through fp.lam each of these
        # calls would pay a method call and its checks)
        def lam(v: Tensor) -> Tensor:
            if probs is None:
                return v
            pv = probs * v
            return torch.addcmul(pv, probs, pv.sum(-1, keepdim=True), value=-1.0)

        kernel = h @ h.t()  # K = H̃H̃ᵀ, the bias a constant feature
        if has_bias:
            kernel += 1.0
        x = fp.lik.observed_residual(pred, fp.tgt)
        for _ in range(ITERATIONS):  # x ← K Λ x (its scale is irrelevant: one rescale at the end)
            x = kernel @ lam(x)
        scale = float(x.abs().max())
        if not math.isfinite(scale) or scale == 0.0:
            return None
        lx = lam(x / scale)
        q0 = {w_name: lx.t() @ h}
        if has_bias:
            q0[b_name] = lx.sum(0)
        return q0, kernel @ lx  # J q0: the predictions move along K Λ x


def best_start(
    fp, start: tuple[dict[str, Tensor], Tensor], previous: list[Tensor] | None = None
) -> tuple[list[Tensor], list[Tensor]]:
    """(u, F u): u = q0 (cold) or the combination of `previous` and q0 with the largest Rayleigh quotient
    (Rayleigh–Ritz on their span), and F u = Jᵀ Λ J u / N by one vjp (J u is a combination of J p, J q0).
    q0 is zero outside a few tensors, so the span's Gram matrix costs dot products over those alone."""
    q0, jq = start
    where = [fp.names.index(n) for n in q0]
    lam_q = fp.lam(jq)
    if previous is None:
        u = [q0[n] if n in q0 else torch.zeros_like(p) for n, p in zip(fp.names, fp.params, strict=True)]
        lam_u = lam_q
    else:
        jp = fp.jv(previous)
        lam_p = fp.lam(jp)
        flat_p, flat_q = jp.reshape(-1), jq.reshape(-1)
        # the Gram and projected 2×2 matrices; one read-back for the six numbers
        pp, pq, qq, app, apq, aqq = torch.stack(
            [
                torch.stack(torch._foreach_norm(previous)).square().sum(),
                sum(
                    (torch.dot(previous[i].reshape(-1), q0[fp.names[i]].reshape(-1)) for i in where),
                    previous[0].new_zeros(()),  # a tensor start: the sum is a tensor, exactly as before
                ),
                sum(
                    (torch.dot(t.reshape(-1), t.reshape(-1)) for t in q0.values()), previous[0].new_zeros(())
                ),
                torch.dot(flat_p, lam_p.reshape(-1)) / fp.n,
                torch.dot(flat_p, lam_q.reshape(-1)) / fp.n,
                torch.dot(flat_q, lam_q.reshape(-1)) / fp.n,
            ]
        ).tolist()
        a, b = _ritz_2x2([[pp, pq], [pq, qq]], [[app, apq], [apq, aqq]])
        if abs(a) * math.sqrt(pp) <= 1e-6 * abs(b) * math.sqrt(qq):  # the previous vector adds nothing
            u = [q0[n] if n in q0 else torch.zeros_like(p) for n, p in zip(fp.names, fp.params, strict=True)]
            lam_u = lam_q
        else:
            c = b / a
            u = list(previous)
            for i in where:
                u[i] = previous[i] + c * q0[fp.names[i]]
            lam_u = lam_p + c * lam_q  # Λ J u, Λ J linear
    return u, fp.vjp(lam_u / fp.n)


def _ritz_2x2(gram: list[list[float]], proj: list[list[float]]) -> tuple[float, float]:
    """Coefficients (a, b) of the top Ritz vector of the pencil (proj, gram) on a 2-vector span.

    In closed form: G = L Lᵀ (Cholesky by hand), the top eigenvector y of L⁻¹ P L⁻ᵀ, then (a, b) = L⁻ᵀ y.
    numpy's two `eigh` calls cost a visible share of a small model's step inside an estimate.
    When the two vectors are parallel to 1e-10 (G singular to working precision) the span has one
    direction: the vector with the larger Rayleigh quotient is returned."""
    (g11, g12), (_, g22) = gram
    (p11, p12), (_, p22) = proj
    det = g11 * g22 - g12 * g12
    if g11 <= 0.0 and g22 <= 0.0:  # two zero vectors: nothing to combine
        return 1.0, 0.0
    if g11 <= 0.0 or g22 <= 0.0 or det <= 1e-10 * g11 * g22:
        if g22 <= 0.0 or (g11 > 0.0 and p11 / g11 >= p22 / g22):
            return 1.0 / math.sqrt(g11), 0.0
        return 0.0, 1.0 / math.sqrt(g22)
    l11 = math.sqrt(g11)
    l21 = g12 / l11
    l22 = math.sqrt(det / g11)  # = sqrt(g22 − l21²), without the cancellation
    # M = L⁻¹ P L⁻ᵀ with L⁻¹ = [[1/l11, 0], [−l21/(l11 l22), 1/l22]]
    m11 = p11 / g11
    m12 = (p12 - l21 * p11 / l11) / (l11 * l22)
    m22 = (p22 - 2.0 * l21 * p12 / l11 + l21 * l21 * p11 / g11) / (l22 * l22)
    top = 0.5 * (m11 + m22) + math.hypot(0.5 * (m11 - m22), m12)
    y0, y1 = (m12, top - m11) if abs(top - m11) >= abs(top - m22) else (top - m22, m12)
    if y0 == 0.0 and y1 == 0.0:  # M a multiple of the identity: any vector is top
        y0 = 1.0
    return y0 / l11 - y1 * l21 / (l11 * l22), y1 / l22
