"""λ_max(F) starts and Lanczos shortcuts against brute force on tiny float64 networks, one per normalizer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from workers.probes.curvature import TOL, CurvatureProbe
from workers.probes.eigen import _top_ritz, lanczos_top
from workers.probes.fisher import FisherPass
from workers.probes.likelihood import Likelihood
from workers.probes.start import _ritz_2x2, best_start, output_layer_start

from .conftest import brute_fisher, tiny, tiny_rnn


def _flat(vs):
    return torch.cat([v.reshape(-1) for v in vs])


def _pass(model, x, y):
    lik = Likelihood("class")
    fp = FisherPass(model, lik, x, y, F.cross_entropy)
    fp.sampled(lik.sampled_residual(fp.pred, torch.Generator().manual_seed(1)))
    return fp


def _full(fp, part):
    return [part[n] if n in part else torch.zeros_like(p) for n, p in zip(fp.names, fp.params, strict=True)]


def _rayleigh(fisher, v):
    v = _flat(v)
    return float(v @ fisher @ v / (v @ v))


def test_lanczos_shortcuts_keep_the_krylov_ritz_value():
    """A supplied first product and a last vector's Rayleigh quotient give the same top Ritz value as the
    full products do (the same Krylov space), on a symmetric PSD matrix with a known spectrum."""
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(40, 40, dtype=torch.float64, generator=gen))
    a = q @ torch.diag(torch.linspace(0.0, 1.0, 40, dtype=torch.float64) ** 4 * 30) @ q.T

    def product(v):
        return [(a @ v[0].reshape(-1)).reshape(5, 8)]

    init = [torch.randn(5, 8, dtype=torch.float64, generator=gen)]
    for k in (1, 2, 3, 5):
        full, _, _ = lanczos_top(product, init, k)
        first, _, _ = lanczos_top(product, init, k, start_product=product(init))
        quad, vec, info = lanczos_top(product, init, k, quadratic=lambda v: float(_flat(v) @ a @ _flat(v)))
        assert first == pytest.approx(full, rel=1e-12)
        assert quad == pytest.approx(full, rel=1e-12)
        assert info["products"] == k
        v = _flat(vec)
        assert float(v @ a @ v / (v @ v)) == pytest.approx(full, rel=1e-10)  # θ is the vector's quotient
    assert full <= 30 * (1 + 1e-12)


def test_output_layer_start_gives_its_jacobian_product(norm):
    """q0 lives in the output layer only, and the returned J q0 equals a Jacobian-vector product of it;
    best_start's F u equals F u by the pass's own product (cold), and warm its u has a Rayleigh quotient
    at least that of each of the two vectors it combines."""
    model, x, y = tiny(norm, seed=3)
    fp = _pass(model, x, y)
    found = output_layer_start(fp)
    assert found is not None
    part, jq = found
    assert set(part) == {"out.weight", "out.bias"}
    q0 = _full(fp, part)
    torch.testing.assert_close(jq, fp.jv(q0), rtol=1e-10, atol=1e-12)
    u, fu = best_start(fp, found)
    torch.testing.assert_close(_flat(fu), _flat(fp.fvp(u)), rtol=1e-10, atol=1e-12)
    fisher, _, _, _ = brute_fisher(model, x, y)
    torch.testing.assert_close(_flat(fu), fisher @ _flat(u), rtol=1e-9, atol=1e-12)
    previous = [
        torch.randn(p.shape, dtype=p.dtype, generator=torch.Generator().manual_seed(4)) for p in fp.params
    ]
    u, fu = best_start(fp, found, previous)
    torch.testing.assert_close(_flat(fu), fisher @ _flat(u), rtol=1e-9, atol=1e-12)
    best = max(_rayleigh(fisher, previous), _rayleigh(fisher, q0))
    assert _rayleigh(fisher, u) >= best * (1 - 1e-10)


def test_recurrent_predictions_get_no_output_layer_start():
    model, x, y = tiny_rnn("layer", "lstm")
    assert output_layer_start(_pass(model, x, y)) is None


def test_cold_lambda_max_of_feedforward_nets_within_the_stated_tolerance(norm):
    """The first estimate starts at the output layer's block and iterates to TOL, at most MAX_VECTORS
    products: when its reported residual says it got there, it is within TOL of the brute-force
    λ_max (else the residual says it did not); a Ritz value is never above λ_max, and a warm estimate
    on the same batch (previous vector in its start) never below the cold one."""
    for seed in (0, 1, 2):
        model, x, y = tiny(norm, seed=seed, batch=8)
        fisher, _, _, _ = brute_fisher(model, x, y)
        top = float(torch.linalg.eigvalsh(fisher)[-1])
        probe = CurvatureProbe(model, Likelihood("class"), F.cross_entropy, seed=seed)
        payload, _ = probe.estimate(x, y, lr=0.1)
        cold, residual = payload["lambda_max"], payload["lambda_residual"]["lambda_max"]
        assert cold <= top * (1 + 1e-9)
        if residual <= TOL:
            assert cold == pytest.approx(top, rel=TOL), seed
        else:
            assert top - cold <= top * 0.1, (seed, residual)  # capped short of the tolerance, not far off
        warm, _ = probe.estimate(x, y, lr=0.1)
        assert cold * (1 - 1e-9) <= warm["lambda_max"] <= top * (1 + 1e-9)


def _span_top(basis, f):
    """The largest Rayleigh quotient of f on the span of the basis columns, from an orthonormal basis
    (QR: no squared condition number, unlike anything formed from the Gram matrix)."""
    q, _ = torch.linalg.qr(basis)
    return float(torch.linalg.eigvalsh(q.T @ f @ q)[-1])


def test_closed_form_2x2_ritz_is_the_top_of_the_pencil():
    """Random pairs, nearly parallel pairs and a zero vector: (a, b)'s quotient is the pencil's top."""
    gen = torch.Generator().manual_seed(0)
    for trial in range(300):
        basis = torch.randn(20, 2, generator=gen, dtype=torch.float64)
        if trial % 3 == 0:  # nearly parallel: the Gram matrix is ill conditioned
            basis[:, 1] = 2.0 * basis[:, 0] + 1e-4 * torch.randn(20, generator=gen, dtype=torch.float64)
        b = torch.randn(20, 20, generator=gen, dtype=torch.float64)
        f = b @ b.T
        gram, proj = (basis.T @ basis).tolist(), (basis.T @ f @ basis).tolist()
        a, c = _ritz_2x2(gram, proj)
        coef = torch.tensor([a, c], dtype=torch.float64)
        quotient = float(coef @ basis.T @ f @ basis @ coef / (coef @ basis.T @ basis @ coef))
        assert quotient == pytest.approx(_span_top(basis, f), rel=1e-9)
    only = torch.randn(20, generator=gen, dtype=torch.float64)
    gram = [[float(only @ only), 0.0], [0.0, 0.0]]  # the second vector is zero: the first alone
    assert _ritz_2x2(gram, [[3.0, 0.0], [0.0, 0.0]]) == (pytest.approx(1 / float(only.norm())), 0.0)


def test_top_ritz_of_small_tridiagonals_matches_eigh():
    gen = torch.Generator().manual_seed(1)
    for trial in range(200):
        k = 3 + trial % 4
        alphas = (torch.randn(k, generator=gen, dtype=torch.float64) * 10 ** (trial % 3)).tolist()
        betas = (torch.rand(k - 1, generator=gen, dtype=torch.float64) * 10 ** -(trial % 5)).tolist()
        diag, off = torch.tensor(alphas, dtype=torch.float64), torch.tensor(betas, dtype=torch.float64)
        tri = torch.diag(diag) + torch.diag(off, 1) + torch.diag(off, -1)
        values = torch.linalg.eigvalsh(tri)
        theta, vec = _top_ritz(alphas, betas)
        scale = float(values.abs().max())
        assert abs(theta - float(values[-1])) <= 1e-13 * scale
        s = torch.tensor(vec, dtype=torch.float64)
        assert float(s.norm()) == pytest.approx(1.0, abs=1e-12)
        assert float((tri @ s - theta * s).norm()) <= 1e-10 * scale


def test_lanczos_keeps_its_basis_between_calls():
    """With a workspace the basis matrix is allocated once (same storage on the next call), and the
    results are those of a call without one."""
    gen = torch.Generator().manual_seed(2)
    b = torch.randn(30, 30, generator=gen, dtype=torch.float64)
    a = b @ b.T

    def product(v):
        return [(a @ v[0].reshape(-1)).reshape(5, 6)]

    init = [torch.randn(5, 6, generator=gen, dtype=torch.float64)]
    space: dict = {}
    first = lanczos_top(product, init, 3, workspace=space)
    storage = space["basis"].data_ptr()
    again = lanczos_top(product, init, 3, workspace=space)
    alone = lanczos_top(product, init, 3)
    assert space["basis"].data_ptr() == storage
    assert first[0] == again[0] == alone[0]
    torch.testing.assert_close(again[1][0], alone[1][0], rtol=0, atol=0)
