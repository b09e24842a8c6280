"""The probes hook end to end: payload names, the budget, the SGD norm growth, power iteration, §3.1."""

from __future__ import annotations

import json
import math
import statistics
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from normlab_client.spec import ProbeSpec, RunSpec
from workers.engine import train
from workers.probes import make_prober
from workers.probes.curvature import CurvatureProbe
from workers.probes.fisher import FisherPass, power_iteration
from workers.probes.likelihood import Likelihood
from workers.probes.prober import finite
from workers.probes.weight_sets import add_update, find_weight_sets, snapshot

from .conftest import brute_fisher, tiny

WEIGHT_SET_KEYS = {
    "name",
    "weight_norm",
    "along_w_curvature",
    "trace_ww",
    "scaled_trace_ww",
    "gain_curvature",
    "effective_lr",
    "angular_update",
}
FISHER_KEYS = {
    "trace",
    "trace_estimator",
    "lambda_max",
    "eta_lambda_max",
    "hessian_lambda_max",
    "weight_sets",
    "cost_steps",
    "empirical",
}


def _run(settings, **kw):
    events = []
    probes = ProbeSpec(enabled=True, **kw.pop("probes", {}))
    result = train(RunSpec(probes=probes, **kw), events.append, settings=settings)
    assert result.status == "completed", result.error
    return result, events


def test_feedforward_run_emits_contract_payloads(settings):
    result, events = _run(
        settings,
        task="digits",
        norm="batch",
        hidden_size=16,
        steps=60,
        eval_every=1000,
        probes=dict(trace_every=20, fisher_every=5, budget=5.0, empirical_fisher=True),
    )
    hidden = [e.payload for e in events if e.kind == "hidden"]
    fisher = [e.payload for e in events if e.kind == "fisher"]
    assert [e.step for e in events if e.kind == "hidden"] == [1, 20, 40, 60]
    assert len(fisher) >= 2
    layer = hidden[-1]["layers"][0]
    assert set(layer) == {"name", "summed_mean", "summed_std", "act_norm", "weight_row_norms", "gain"}
    rows = layer["weight_row_norms"]
    assert rows["min"] <= rows["median"] <= rows["max"]
    last = fisher[-1]
    assert FISHER_KEYS <= set(last) and last["cost_steps"] > 0
    assert last["trace_estimator"]["hidden.0"] == "summed-gradient"  # BN in train mode mixes the batch
    assert last["trace_estimator"]["out"] == "per-sample"
    assert "not a curvature estimate" in last["empirical"]["note"].lower()
    bn = [g for g in last["weight_sets"] if g["normalizer"] == "batch"]
    assert bn and all(WEIGHT_SET_KEYS <= set(g) for g in last["weight_sets"])
    assert all(g["along_w_curvature"] <= 1e-6 * g["trace_ww"] for g in bn)
    assert result.probes["hidden"] == hidden[-1] and result.probes["fisher"] == last
    json.dumps(result.probes, allow_nan=False)  # NaN/Inf never reach an event (finite() maps them to null)
    assert finite({"a": [1.0, math.nan], "b": {"c": math.inf}}) == {"a": [1.0, None], "b": {"c": None}}


def test_recurrent_run_traces_every_time_step(settings):
    # 40 steps at a budget of 5: the plan fits an estimate at every step from step 5
    result, events = _run(
        settings,
        task="adding",
        norm="layer",
        seq_len=12,
        hidden_size=8,
        batch_size=4,
        steps=40,
        eval_every=1000,
        probes=dict(trace_every=3, fisher_every=1, budget=5.0),
    )
    h = result.probes["hidden"]
    assert h["time_steps"] == 12
    for key in ("hidden_norms", "cell_norms", "summed_mean", "summed_std", "grad_norms"):
        assert len(h[key]) == 12, key
    assert all(g > 0 for g in h["grad_norms"])  # ∂L/∂h_t flows back to every step
    fisher = result.probes["fisher"]
    assert fisher["lambda_max"] > 0 and fisher["trace_estimator"]["rnn.0.hh"] == "per-sample"


def test_probes_off_gives_no_prober():
    spec = RunSpec(task="digits")
    assert make_prober(spec, torch.nn.Linear(2, 2), None, None) is None


def test_a_density_task_trains_without_probes_instead_of_failing(settings):
    """The Fisher needs the model's predictive distribution: a mixture density is not modelled, so the
    probes decline the model (the run says so) rather than fail it at step 0."""
    result, events = _run(
        settings, task="handwriting", steps=2, eval_every=2, batch_size=2, seq_len=8, hidden_size=8
    )
    assert result.probes is None or result.probes.get("fisher") is None
    assert not [e for e in events if e.kind in ("fisher", "hidden")]


def test_default_budget_holds_on_a_short_run(settings):
    # the plan fits 12 estimates (fisher_every 50) within 0.85 × 15 % of 600 steps
    result, events = _run(settings, task="digits", norm="layer", hidden_size=32, steps=600, eval_every=1000)
    fisher = [e for e in events if e.kind == "fisher"]
    assert fisher, "at least one estimate within the default budget"
    assert result.probes["overhead"] <= 0.15 * 1.5  # measured by the prober itself, against training time


def test_a_run_without_room_warns_at_once_with_a_budget_that_fits(settings):
    # 30 steps at the default 15 % leave room for ≈ 2.8 training steps of Fisher work; this LN-LSTM's
    # first estimate is planned at ≈ 9: none fits, and the run says so while it runs
    spec = dict(task="adding", norm="layer", hidden_size=32, seq_len=40, steps=30, eval_every=1000)
    result, events = _run(settings, **spec)
    assert not [e for e in events if e.kind == "fisher"]
    warnings = [e for e in events if e.kind == "log" and e.payload.get("probe") == "fisher_budget"]
    assert len(warnings) == 1 and warnings[0].step < 30  # logged during the run, once
    w = warnings[0].payload
    assert w["level"] == "warning" and "No Fisher estimate fitted the budget — raise it to" in w["message"]
    assert w["budget"] == 0.15 and w["budget_needed"] > w["budget"]
    assert f"{round(w['budget_needed'] * 100)} %" in w["message"]
    assert result.probes["fisher_note"] == w["message"]
    assert result.probes["overhead"] <= 0.15 * 1.5
    # the budget it names is enough for the same run to get its estimate
    result, events = _run(settings, **spec, probes={"budget": w["budget_needed"]})
    assert [e for e in events if e.kind == "fisher"] and result.probes["fisher_note"] is None


def test_a_default_length_run_gets_its_first_estimate_early_and_several_in_all(settings):
    # planned over the run from the spec: the first at step 5, the others spread over the 500 steps
    result, events = _run(settings, task="mnist1d", norm="layer")
    fisher = [e for e in events if e.kind == "fisher"]
    assert fisher and fisher[0].step <= 0.1 * 500
    assert len(fisher) >= 5
    assert fisher[0].payload["cold"] and not fisher[-1].payload["cold"]


def test_adam_steps_are_measured_angles_not_zero(settings):
    result, events = _run(
        settings,
        task="digits",
        norm="layer",
        hidden_size=16,
        steps=30,
        eval_every=1000,
        optimizer="adam",
        probes=dict(fisher_every=5, budget=5.0),
    )
    last = [e.payload for e in events if e.kind == "fisher"][-1]
    assert last["optimizer"] == "adam"
    for g in last["weight_sets"]:
        assert g["optimizer"] == "adam" and g["angular_update"] > 0 and g["effective_step"] > 0, g
        # Adam moves each weight by ≈ lr: the relative step is of the order lr·√n/‖w‖, never 0
        assert g["effective_step"] >= 0.1 * g["angular_update"]


def test_angular_update_keeps_tiny_angles_in_float32():
    """A 1e-4 rad turn of a 4096-weight float32 matrix: arccos of the float32 cosine read 0."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 64, generator=gen)
    d = torch.randn(64, 64, generator=gen)
    d -= (d * w).sum() / (w * w).sum() * w  # orthogonal to w: a pure rotation (plus O(angle²) growth)
    after = w + 1e-4 * w.norm() / d.norm() * d
    weight_set = find_weight_sets(torch.nn.Linear(64, 64))[0]
    entry: dict = {}
    add_update(entry, weight_set, w, after, "adam")
    w64, a64 = w.double().reshape(-1), after.double().reshape(-1)
    want = float(torch.arccos((w64 @ a64) / (w64.norm() * a64.norm())))
    assert entry["angular_update"] == pytest.approx(want, rel=1e-3)
    assert entry["effective_step"] == pytest.approx(float((a64 - w64).norm() / w64.norm()), rel=1e-6)
    assert entry["optimizer"] == "adam"


@pytest.mark.parametrize("kind", ["adam-like", "mostly-growth", "pure-scaling", "large"])
def test_angular_update_and_effective_step_match_their_float64_definitions_row_by_row(kind):
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(48, 96, generator=gen)
    d = 1e-3 * torch.sign(torch.randn(48, 96, generator=gen)) * torch.rand(48, 96, generator=gen)
    if kind == "mostly-growth":  # an update almost along w: its orthogonal part is small
        d = 1e-3 * w + 1e-6 * d
    elif kind == "pure-scaling":
        d = 1e-3 * w
    elif kind == "large":  # turns of order one
        d = torch.randn(48, 96, generator=gen)
    after = w + d
    weight_set = find_weight_sets(torch.nn.Linear(96, 48))[0]
    entry: dict = {}
    add_update(entry, weight_set, w, after)
    assert weight_set.by_row is False  # a plain Linear: one whole-matrix set (row sets: test below)
    w64, a64 = w.double().reshape(1, -1), after.double().reshape(1, -1)  # the definitions, in float64
    ua, ub = w64 / w64.norm(dim=1, keepdim=True), a64 / a64.norm(dim=1, keepdim=True)
    angle = 2 * torch.atan2((ua - ub).norm(dim=1), (ua + ub).norm(dim=1))
    step = (a64 - w64).norm(dim=1) / w64.norm(dim=1)
    if kind in ("pure-scaling", "mostly-growth"):  # a turn of 2e-8 rad (float32 rounding of w + d)
        assert entry["angular_update"] == pytest.approx(float(angle.median()), abs=1e-10)
        assert entry["angular_update"] <= 1e-4 * float(step.median())
    else:
        assert entry["angular_update"] == pytest.approx(float(angle.median()), rel=1e-4)
    assert entry["effective_step"] == pytest.approx(float(step.median()), rel=1e-5)
    assert entry["weight_norm_next"] == pytest.approx(float(a64.norm(dim=1).median()), rel=1e-6)


def test_row_weight_sets_report_the_median_row_angle():
    gen = torch.Generator().manual_seed(2)
    model, _, _ = tiny("weight", seed=2, batch=4)
    weight_set = next(g for g in find_weight_sets(model) if g.by_row)
    w = dict(model.named_parameters())[weight_set.param].detach()
    after = w + 1e-3 * torch.randn(w.shape, generator=gen)
    entry: dict = {}
    add_update(entry, weight_set, w, after)
    w64, a64 = w.double().reshape(w.shape[0], -1), after.double().reshape(w.shape[0], -1)
    ua, ub = w64 / w64.norm(dim=1, keepdim=True), a64 / a64.norm(dim=1, keepdim=True)
    angle = 2 * torch.atan2((ua - ub).norm(dim=1), (ua + ub).norm(dim=1))
    assert entry["angular_update"] == pytest.approx(float(angle.median()), rel=1e-4)


@pytest.mark.parametrize("norm", ["layer", "batch", "weight"])
def test_plain_sgd_grows_scale_invariant_weights_by_eta_squared_grad_squared(norm):
    model, x, y = tiny(norm, seed=4, batch=8)
    for m in model.modules():  # exact scale invariance needs no eps in σ
        if hasattr(m, "eps"):
            m.eps = 1e-300 if "Batch" in type(m).__name__ else 0.0
    lr = 0.7
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0, weight_decay=0.0)
    probe = CurvatureProbe(model, Likelihood("class"), F.cross_entropy)
    params = dict(model.named_parameters())
    for _ in range(3):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        payload, _ = probe.estimate(x, y, lr)
        before = snapshot(probe.weight_sets, params)
        opt.step()
        for entry, weight_set in zip(payload["weight_sets"], probe.weight_sets, strict=True):
            add_update(entry, weight_set, before[weight_set.param], params[weight_set.param])
            w, g = before[weight_set.param], params[weight_set.param].detach()
            if not weight_set.scale_invariant:
                continue
            rows_before = w.reshape(w.shape[0], -1) if weight_set.by_row else w.reshape(1, -1)
            rows_after = g.reshape(g.shape[0], -1) if weight_set.by_row else g.reshape(1, -1)
            grad = (rows_before - rows_after) / lr
            growth = rows_after.pow(2).sum(1) - rows_before.pow(2).sum(1)
            torch.testing.assert_close(growth, lr**2 * grad.pow(2).sum(1), rtol=1e-8, atol=1e-14)
            assert entry["grad_along_w"] <= 1e-8 * max(entry["grad_norm"], 1e-12)
            if not weight_set.by_row:
                assert entry["weight_norm_next"] ** 2 == pytest.approx(
                    entry["weight_norm"] ** 2 + lr**2 * entry["grad_norm"] ** 2, rel=1e-10
                )
                assert entry["effective_lr"] == pytest.approx(lr / entry["weight_norm"] ** 2)


def test_power_iteration_finds_top_eigenvalues_and_warm_start_keeps_them():
    model, x, y = tiny("layer", seed=6)
    fisher, _, _, _ = brute_fisher(model, x, y)
    fp = FisherPass(model, Likelihood("class"), x, y, F.cross_entropy)
    gen = torch.Generator().manual_seed(0)
    init = [torch.randn(p.shape, dtype=p.dtype, generator=gen) for p in fp.params]
    lam, vec = power_iteration(fp.fvp, init, 200)
    top = float(torch.linalg.eigvalsh(fisher)[-1])
    assert lam == pytest.approx(top, rel=1e-6)
    warm, _ = power_iteration(fp.fvp, vec, 1)
    assert warm == pytest.approx(top, rel=1e-6)
    h_lam, _ = power_iteration(fp.hvp, init, 300)
    assert h_lam > 0


def test_layer_norm_flattens_hidden_norms_over_a_long_adding_sequence(settings):
    """§3.1: the spread max_t ‖h_t‖ / min_t ‖h_t‖ of an LSTM over 300 steps, LN vs none, seeds 0–2.

    Measured (hidden 32, batch 8, first step): LN 1.67, 1.34, 1.54; none 4.07, 3.77, 5.30 — the
    unnormalized state starts near 0 and takes tens of steps to reach its level; LN's does not."""
    spread = {}
    for seed in (0, 1, 2):
        for norm in ("layer", "none"):
            result, _ = _run(
                settings,
                task="adding",
                norm=norm,
                seq_len=300,
                hidden_size=32,
                batch_size=8,
                steps=1,
                seed=seed,
                eval_every=1000,
                probes=dict(fisher_every=100_000),
            )
            h = result.probes["hidden"]["hidden_norms"]
            spread[seed, norm] = max(h) / min(h)
        assert spread[seed, "none"] >= 1.8 * spread[seed, "layer"], spread
    assert statistics.mean(spread[s, "layer"] for s in range(3)) < 2.0


def test_summary_shape_for_cli_json():
    spec = RunSpec(task="digits", probes=ProbeSpec(enabled=True))
    data = SimpleNamespace(info=SimpleNamespace(target="class"), loss=F.cross_entropy)
    model, _, _ = tiny("layer")
    prober = make_prober(spec, model, data, torch.optim.SGD(model.parameters(), lr=0.1))
    assert set(prober.summary()) >= {"hidden", "fisher"}
