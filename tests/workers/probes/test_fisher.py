"""The Fisher estimators against brute force on tiny float64 networks, one per normalizer."""

from __future__ import annotations

import pytest
import torch

from workers.probes.fisher import FisherPass, module_traces
from workers.probes.likelihood import Likelihood
from workers.probes.weight_sets import find_weight_sets, row_quantities

from .conftest import brute_fisher, tiny, tiny_rnn


def _flat(vs):
    return torch.cat([v.reshape(-1) for v in vs])


def _blocks(names, sizes):
    out, start = {}, 0
    for n, s in zip(names, sizes, strict=True):
        out[n] = slice(start, start + s)
        start += s
    return out


def test_brute_fisher_equals_ggn_and_fvp(norm):
    model, x, y = tiny(norm)
    fisher, ggn, names, sizes = brute_fisher(model, x, y)
    scale = fisher.abs().max()
    assert float((fisher - ggn).abs().max() / scale) <= 1e-10
    fp = FisherPass(model, Likelihood("class"), x, y)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        v = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in fp.params]
        got = _flat(fp.fvp(v))
        want = fisher @ _flat(v)
        assert float((got - want).norm() / want.norm()) <= 1e-10


def test_mc_trace_mean_within_4_standard_errors(norm):
    model, x, y = tiny(norm, seed=3)
    fisher, _, names, sizes = brute_fisher(model, x, y)
    blocks = _blocks(names, sizes)
    lik = Likelihood("class")
    fp = FisherPass(model, lik, x, y)
    gen = torch.Generator().manual_seed(7)
    draws: dict[str, list[float]] = {}
    estimators = {}
    for _ in range(250):
        stats, est, _ = fp.sampled(lik.sampled_residual(fp.pred, gen))
        traces, kinds = module_traces(stats, est, 1.0 / fp.n)
        for mod, t in traces.items():
            draws.setdefault(mod, []).append(t)
        estimators = kinds
    for mod, values in draws.items():
        exact = sum(float(fisher[blocks[n], blocks[n]].trace()) for n in names if n.rsplit(".", 1)[0] == mod)
        v = torch.tensor(values)
        se = float(v.std() / len(v) ** 0.5)
        got = float(v.mean())
        assert abs(got - exact) <= 4 * se + 1e-12, (mod, estimators[mod], exact, got, se)
    if norm == "batch":  # BN in train mode mixes the batch: hidden layers fall back; the head after it not
        assert estimators["hidden.0"] == "summed-gradient" and estimators["out"] == "per-sample"
    else:
        assert set(estimators.values()) == {"per-sample"}, estimators


def _weight_set_exact(fisher, blocks, name, param, row=None):
    blk = fisher[blocks[name], blocks[name]]
    w = param.detach().reshape(param.shape[0], -1)
    if row is not None:
        cols = w.shape[1]
        idx = slice(row * cols, (row + 1) * cols)
        blk, w = blk[idx, idx], w[row]
    u = w.reshape(-1) / w.norm()
    return float(u @ blk @ u), float(blk.trace())


def test_along_weight_curvature_zero_only_for_scale_invariant_weight_sets(norm):
    model, x, y = tiny(norm, seed=5)
    fisher, _, names, sizes = brute_fisher(model, x, y)
    blocks = _blocks(names, sizes)
    params = dict(model.named_parameters())
    lik = Likelihood("class")
    fp = FisherPass(model, lik, x, y)
    stats, _, _ = fp.sampled(lik.sampled_residual(fp.pred, torch.Generator().manual_seed(0)))
    for g in find_weight_sets(model):
        if g.name.startswith("out"):
            continue
        p = params[g.param]
        for row in range(p.shape[0]) if g.by_row else [None]:
            along, trace = _weight_set_exact(fisher, blocks, g.param, p, row)
            est = row_quantities(stats[g.param], p, 1.0 / fp.n, row)
            if g.scale_invariant:  # ≈ 0: the normalizers' eps (1e-5 added to σ²) breaks invariance slightly
                assert abs(along) <= 1e-7 * trace, (g, row, along, trace)
                assert abs(est["along_w_curvature"]) <= 1e-7 * max(est["trace_ww"], 1e-30)
            else:  # no normalization: the weight direction carries curvature
                assert along >= 1e-3 * trace, (g, along, trace)
    if norm == "layer":  # one row of an LN-normalized matrix is not scale-invariant on its own
        p = params["hidden.0.weight"]
        rows = [_weight_set_exact(fisher, blocks, "hidden.0.weight", p, r) for r in range(p.shape[0])]
        assert max(a / t for a, t in rows) >= 1e-3


@pytest.mark.parametrize("norm_name", ["layer", "batch", "weight", "rms"])
def test_doubling_a_scale_invariant_weight_set_quarters_its_fisher_trace(norm_name):
    model, x, y = tiny(norm_name, seed=2)
    for m in model.modules():  # exact invariance: without eps, σ(2Wx) = 2σ(Wx)
        if hasattr(m, "eps"):
            m.eps = 1e-300 if "Batch" in type(m).__name__ else 0.0  # batch_norm refuses 0
    lik = Likelihood("class")
    weight_set = next(g for g in find_weight_sets(model) if g.scale_invariant)
    p = dict(model.named_parameters())[weight_set.param]

    def traces():
        fisher, _, names, sizes = brute_fisher(model, x, y)
        sl = _blocks(names, sizes)[weight_set.param]
        fp = FisherPass(model, lik, x, y)
        stats, _, _ = fp.sampled(lik.sampled_residual(fp.pred, torch.Generator().manual_seed(4)))
        return float(fisher[sl, sl].trace()), float(stats[weight_set.param].row_sq.sum()), fp.pred.detach()

    exact1, mc1, out1 = traces()
    with torch.no_grad():
        p.mul_(2.0)
    exact2, mc2, out2 = traces()
    torch.testing.assert_close(out1, out2, rtol=1e-10, atol=1e-12)  # same function
    assert exact2 / exact1 == pytest.approx(0.25, rel=1e-9)
    assert mc2 / mc1 == pytest.approx(0.25, rel=1e-9)  # same sampled labels: exactly a quarter


@pytest.mark.parametrize(
    ("cell", "norm_name"), [("lstm", "layer"), ("lstm", "batch"), ("gru", "none"), ("tanh", "weight")]
)
def test_recurrent_fisher_fvp_and_mc_trace(cell, norm_name):
    model, x, y = tiny_rnn(norm_name, cell)
    fisher, ggn, names, sizes = brute_fisher(model, x, y)
    assert float((fisher - ggn).abs().max() / fisher.abs().max()) <= 1e-10
    blocks = _blocks(names, sizes)
    lik = Likelihood("class")
    fp = FisherPass(model, lik, x, y)
    v = [torch.randn(p.shape, generator=torch.Generator().manual_seed(1), dtype=p.dtype) for p in fp.params]
    want = fisher @ _flat(v)
    tol = 1e-7 if fp.fused else 1e-10  # the fused LSTM path: Jv by central differences
    assert float((_flat(fp.fvp(v)) - want).norm() / want.norm()) <= tol
    gen = torch.Generator().manual_seed(11)
    draws: dict[str, list[float]] = {}
    for _ in range(64):
        stats, est, _ = fp.sampled(lik.sampled_residual(fp.pred, gen))
        for mod, t in module_traces(stats, est, 1.0 / fp.n)[0].items():
            draws.setdefault(mod, []).append(t)
    kinds = module_traces(stats, est, 1.0 / fp.n)[1]
    for mod, values in draws.items():
        exact = sum(float(fisher[blocks[n], blocks[n]].trace()) for n in names if n.rsplit(".", 1)[0] == mod)
        t = torch.tensor(values)
        assert abs(float(t.mean()) - exact) <= 4 * float(t.std()) / len(t) ** 0.5 + 1e-12, (mod, kinds[mod])
    if norm_name != "batch":  # the recurrent weights decompose per case too (time-major tensors handled)
        recurrent = {"lstm": "rnn.0.hh", "gru": "rnn.0.hh_gates", "tanh": "rnn.0.proj"}[cell]
        assert kinds[recurrent] == kinds["out"] == "per-sample", kinds


def test_weights_used_outside_a_hook_fall_back_to_the_summed_gradient():
    """A use of a layer's weight the hooks cannot see makes the per-case sums disagree with ∇S."""
    model, x, y = tiny("layer", seed=8)
    layer = model.hidden[1]
    original = layer.normalize
    layer.normalize = lambda a, step=None: original(a) + 0.1 * layer.weight.sum(1)
    lik = Likelihood("class")
    fp = FisherPass(model, lik, x, y)
    _, est, _ = fp.sampled(lik.sampled_residual(fp.pred, torch.Generator().manual_seed(0)))
    assert est["hidden.1.weight"] == "summed-gradient"
    assert est["hidden.0.weight"] == est["out.weight"] == "per-sample"


@pytest.mark.parametrize(
    ("kind", "norm", "cell"),
    [
        ("mlp", "layer", None),
        ("mlp", "batch", None),
        ("rnn", "layer", "lstm"),
        ("rnn", "none", "lstm"),
        ("rnn", "layer", "gru"),
    ],
)
@pytest.mark.parametrize("traced", [False, True], ids=["plain-step", "traced-step"])
def test_an_estimate_on_the_training_forward_equals_one_with_its_own_forward(kind, norm, cell, traced):
    # the training step's forward, recorded and its graph kept through the loss's backward, serves the
    # estimate of that step (CPU): the same payload as an estimate that runs a forward pass of its own
    import torch.nn.functional as F

    from workers.probes.curvature import CurvatureProbe

    model, x, y = tiny(norm, seed=3) if kind == "mlp" else tiny_rnn(norm, cell, seed=3)

    def loss_fn(out, target):
        return F.cross_entropy(out if out.dim() == 2 else out[:, -1], target)

    lik = Likelihood("class")
    payloads, forwards = [], []
    for reuse in (False, True):
        probe = CurvatureProbe(model, lik, loss_fn, seed=5)
        buffers = {n: b.clone() for n, b in model.named_buffers()}
        model.zero_grad(set_to_none=True)
        recorded = probe.recording(x) if reuse else None
        model.capture = "fast" if traced else False  # a hidden trace on the same step records too
        if recorded is not None:
            with recorded:
                out = model(x)
        else:
            out = model(x)
        loss_fn(out, y).backward(retain_graph=recorded is not None)
        model.capture = False
        calls: list[int] = []
        hook = model.register_forward_pre_hook(lambda *_, calls=calls: calls.append(1))
        payload, _ = probe.estimate(x, y, 0.1, recorded, out if recorded is not None else None)
        hook.remove()
        payloads.append(payload)
        forwards.append(len(calls))
        for n, b in model.named_buffers():  # (the training forward moved BatchNorm's running statistics)
            b.copy_(buffers[n])
    alone, reused = payloads
    assert forwards[0] - forwards[1] == 1  # the estimate ran no forward pass of its own
    assert reused["trace_estimator"] == alone["trace_estimator"]
    for mod, value in alone["trace"].items():
        assert reused["trace"][mod] == pytest.approx(value, rel=1e-9)
    assert reused["lambda_max"] == pytest.approx(alone["lambda_max"], rel=1e-9)
    for a, b in zip(alone["weight_sets"], reused["weight_sets"], strict=True):
        assert b["trace_ww"] == pytest.approx(a["trace_ww"], rel=1e-9)
