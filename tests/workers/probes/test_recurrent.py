"""Recurrent layers against float64 brute force: per-sample traces (exact expectation over sampled labels),
Fisher-vector products on both paths, and λ_max from a cold start at W and at 2W."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from workers.engine.models import RecurrentNet
from workers.probes.curvature import TOL, CurvatureProbe
from workers.probes.fisher import FisherPass
from workers.probes.likelihood import Likelihood

from .conftest import _perturb, brute_fisher, tiny_rnn

NORMS = ("none", "layer", "batch", "weight", "rms")
CASES = [(cell, norm) for cell in ("lstm", "gru", "tanh") for norm in NORMS]


def _model(cell: str, norm: str, placement: str = "full"):
    if placement == "full":
        return tiny_rnn(norm, cell)
    model, x, y = tiny_rnn(norm, cell)
    torch.manual_seed(0)
    model = RecurrentNet(2, 3, 1, 3, cell, norm, placement=placement, max_steps=5).double().train()
    _perturb(model)
    return model, x, y


def _flat(vs):
    return torch.cat([v.reshape(-1) for v in vs])


def _exact_expected_traces(fp: FisherPass) -> tuple[dict[str, float], dict[str, str]]:
    """E over labels drawn from the model of the per-sample estimator, exactly: for each class c every case
    back-propagates √p_nc (p_n − e_c), so Σ_c of the per-case squared norms is Σ_n Σ_c p_nc ‖g_nc‖²."""
    p = torch.softmax(fp.pred.detach(), -1)
    total: dict[str, float] = {}
    est: dict[str, str] = {}
    for c in range(p.shape[1]):
        residual = p.sqrt()[:, c : c + 1] * (p - F.one_hot(torch.full((fp.n,), c), p.shape[1]).double())
        stats, est, _ = fp.sampled(residual)
        for name, st in stats.items():
            total[name] = total.get(name, 0.0) + float(st.row_sq.sum()) / fp.n
    return total, est


@pytest.mark.parametrize(
    ("cell", "norm", "placement"), [(c, n, "full") for c, n in CASES] + [("lstm", "layer", "cell")]
)
def test_per_sample_traces_equal_the_fisher_diagonal_blocks(cell, norm, placement):
    model, x, y = _model(cell, norm, placement)
    fisher, _, names, sizes = brute_fisher(model, x, y)
    fp = FisherPass(model, Likelihood("class"), x, y)
    got, est = _exact_expected_traces(fp)
    start, checked = 0, 0
    for name, size in zip(names, sizes, strict=True):
        exact = float(fisher[start : start + size, start : start + size].trace())
        start += size
        if est[name] == "per-sample":
            assert got[name] == pytest.approx(exact, rel=1e-9, abs=1e-13), (name, exact, got[name])
            checked += 1
    fused = cell == "lstm" and (norm == "none" or (norm == "layer"))
    assert fp.fused == fused
    if fused:  # the fused path's boundary tensors give every parameter's per-case gradient
        assert set(est.values()) == {"per-sample"}, est
    elif norm != "batch":  # step by step, the hooks see every weight (the LSTM's gate bias excepted)
        recurrent = {"lstm": "rnn.0.hh.weight", "gru": "rnn.0.hh_gates.weight", "tanh": "rnn.0.proj.weight"}
        weight = recurrent[cell].replace("weight", "v") if norm == "weight" else recurrent[cell]
        assert est[weight] == est["out.weight"] == "per-sample", est
    assert checked >= 2


@pytest.mark.parametrize(("norm", "placement"), [("layer", "full"), ("none", "full"), ("layer", "cell")])
def test_fused_path_products_match_brute_force(norm, placement):
    model, x, y = _model("lstm", norm, placement)
    fisher, _, _, _ = brute_fisher(model, x, y)
    gen = torch.Generator().manual_seed(1)
    for fused, tol in ((True, 1e-7), (False, 1e-10)):  # central differences / exact double backward
        fp = FisherPass(model, Likelihood("class"), x, y, fused=fused)
        assert fp.fused == fused
        theta, versions = [p.detach().clone() for p in fp.params], [p._version for p in fp.params]
        v = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in fp.params]
        want = fisher @ _flat(v)
        assert float((_flat(fp.fvp(v)) - want).norm() / want.norm()) <= tol
        u = _flat(v) / _flat(v).norm()
        assert fp.curvature_along(v) == pytest.approx(float(u @ fisher @ u), rel=10 * tol)
        # the central differences move the parameters in place: put back bit for bit, and unseen by
        # autograd's version counters (the kept graph's vjp above ran after them)
        assert all(torch.equal(p.detach(), t) for p, t in zip(fp.params, theta, strict=True))
        assert [p._version for p in fp.params] == versions


@pytest.mark.parametrize(
    ("cell", "norm", "seed"),
    [
        ("lstm", "layer", 0),
        ("lstm", "layer", 3),
        ("lstm", "none", 1),
        ("gru", "layer", 2),
        ("tanh", "rms", 4),
    ],
)
def test_cold_lambda_max_converges_at_w_and_2w(cell, norm, seed):
    """The first estimate starts cold; it iterates to TOL, so doubling a set (which moves the top
    eigenvector) does not leave it far below λ_max as a fixed few iterations did (45 % low once)."""
    model, x, y = tiny_rnn(norm, cell, seed=seed)
    name = {"lstm": "rnn.0.hh.weight", "gru": "rnn.0.hh_gates.weight", "tanh": "rnn.0.proj.weight"}[cell]
    for factor in (1.0, 2.0):
        with torch.no_grad():
            dict(model.named_parameters())[name].mul_(factor)
        fisher, _, _, _ = brute_fisher(model, x, y)
        top = float(torch.linalg.eigvalsh(fisher)[-1])
        probe = CurvatureProbe(model, Likelihood("class"), F.cross_entropy, seed=seed)
        payload, _ = probe.estimate(x, y, lr=0.1)
        assert payload["lambda_max"] == pytest.approx(top, rel=TOL), (factor, payload["lambda_residual"])
        assert payload["lambda_max"] <= top * (1 + 1e-6)  # a Ritz value never exceeds λ_max


def test_weight_norm_along_curvature_is_measured():
    """WeightNorm rows: uᵀFu from a Jacobian-vector product ≈ 0; the same measure along an un-normalized
    recurrent weight is clearly positive."""
    for norm, expect_zero in (("weight", True), ("none", False)):
        model, x, y = tiny_rnn(norm, "tanh", seed=5)
        probe = CurvatureProbe(model, Likelihood("class"), F.cross_entropy)
        payload, _ = probe.estimate(x, y, lr=0.1)
        weight_set = next(g for g in payload["weight_sets"] if g["name"].startswith("rnn.0.proj"))
        if expect_zero:
            assert "along_w_measure" in weight_set
            assert abs(weight_set["along_w_curvature"]) <= 1e-9 * weight_set["trace_ww"], weight_set
        else:
            fp = FisherPass(model, Likelihood("class"), x, y)
            w = dict(model.named_parameters())["rnn.0.proj.weight"]
            v = [
                w.detach() if n == "rnn.0.proj.weight" else torch.zeros_like(p)
                for n, p in zip(fp.names, fp.params, strict=True)
            ]
            assert fp.curvature_along(v) >= 1e-3 * weight_set["trace_ww"] / w.shape[0]
