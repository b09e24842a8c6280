"""λ_max of the Fisher and of the loss Hessian, cold and warm, within the stated tolerance of dense float64.

The references share nothing with the probe's code: the Fisher is built as the exact label expectation
F = (1/N) Σ_n Σ_y p(y|x_n) ∇log p(y|x_n) ∇log p(y|x_n)ᵀ (softmax) or (1/N) Σ_n J_nᵀJ_n (unit-variance
Gaussian) from torch Jacobians, the Hessian by torch.autograd.functional.hessian of the loss written out
here; both eigendecomposed densely (eigvalsh). Each model trains between estimates, and one probe carries
its vectors across them (warm), as a run's prober does; the first estimate is cold. Every estimate must be
within TOL of the top eigenvalue, never above it (a Ritz value is a Rayleigh quotient), and not flagged as a
lower bound, for an LN-MLP, an LN-LSTM and the digits-mse full-batch model of the edge-of-stability preset.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call

from normlab_client.events import FisherPayload
from normlab_client.spec import RunSpec
from workers.engine.models import MLP, RecurrentNet
from workers.probes.curvature import TOL, CurvatureProbe
from workers.probes.eigen import lanczos_top
from workers.probes.likelihood import Likelihood

CASES = 128  # the digits-mse batch: the dense Jacobian and Hessian scale with it


def _function(model, capture: bool):
    """(θ, x) ↦ the model's outputs (the last step's, for a sequence) at the flat parameters θ, and θ;
    `capture` puts a recurrent net on its step-by-step path (twice differentiable, as the Hessian needs)."""
    named = list(model.named_parameters())
    shapes, sizes = [p.shape for _, p in named], [p.numel() for _, p in named]
    theta = torch.cat([p.detach().reshape(-1) for _, p in named])

    def outputs(t, x):
        params = {n: c.reshape(s) for (n, _), c, s in zip(named, t.split(sizes), shapes, strict=True)}
        model.capture = capture
        try:
            out = functional_call(model, params, (x,))
        finally:
            model.capture = False
        return out[:, -1] if out.dim() == 3 else out

    return outputs, theta


def _per_case_jacobian(model, x, head, recurrent: bool):
    """d head(outputs_n)/dθ for every case n, (N, C, P), by plain autograd row by row (torch.func's
    transforms go through the engine's LayerNorm differently: their Hessian of the LN-MLP's loss was off
    by 0.2 against central differences of its gradient, plain autograd's by 3e-8)."""
    outputs, theta = _function(model, recurrent)
    return torch.autograd.functional.jacobian(lambda t: head(outputs(t, x)), theta)


def dense_fisher(model, x, gaussian: bool, recurrent: bool):
    """The true Fisher as a dense float64 matrix, from the definition."""
    if gaussian:  # E_y[(y − o)(y − o)ᵀ] = I for y ~ N(o, I): F = (1/N) Σ_n J_nᵀ J_n
        jac = _per_case_jacobian(model, x, lambda out: out, recurrent)
        flat = jac.reshape(-1, jac.shape[-1])
        return flat.T @ flat / x.shape[0]
    # ∇log p(y|x_n) for every case and every label, weighted by √p(y|x_n): F = Σ_n Σ_y p g gᵀ / N
    grads = _per_case_jacobian(model, x, lambda out: torch.log_softmax(out, -1), recurrent)
    outputs, theta = _function(model, recurrent)
    with torch.no_grad():
        p = torch.softmax(outputs(theta, x), -1)
    flat = (grads * p.sqrt().unsqueeze(-1)).reshape(-1, grads.shape[-1])
    return flat.T @ flat / x.shape[0]


def dense_hessian(model, x, loss, recurrent: bool):
    """∇²L of the training loss as a dense float64 matrix, a double backward per parameter."""
    outputs, theta = _function(model, recurrent)
    return torch.autograd.functional.hessian(lambda t: loss(outputs(t, x)), theta)


def _check(payload: dict, fisher, hessian, where: str) -> list[str]:
    """Problems with one estimate against the dense tops (empty: within TOL, unflagged)."""
    problems = []
    for key, matrix in (("lambda_max", fisher), ("hessian_lambda_max", hessian)):
        top = float(torch.linalg.eigvalsh(matrix)[-1])
        value = payload[key]
        if not top * (1 - TOL) <= value <= top * (1 + 1e-6):
            problems.append(f"{where} {key}: {value:.6g} vs dense {top:.6g} ({1 - value / top:+.2%} low)")
        if payload[f"{key}_lower_bound"] or payload[f"{key}_rel_bound"] > TOL:
            problems.append(f"{where} {key}: flagged, bound {payload[f'{key}_rel_bound']:.3g}")
    return problems


def _train_and_probe(
    model, batch, loss_written_out, task_loss, target, lr, recurrent, estimates=3, between=10
):
    """Cold then warm estimates with SGD steps between them; the problems found (see `_check`)."""
    x, y = batch
    probe = CurvatureProbe(model, Likelihood(target), task_loss, power_iterations=2, hessian=True, seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    problems = []
    for i in range(estimates):
        payload, _ = probe.estimate(x, y, lr)
        FisherPayload.model_validate(payload)  # the new fields keep the event's typed contract
        fisher = dense_fisher(model, x, target == "regression", recurrent)
        hessian = dense_hessian(model, x, lambda out: loss_written_out(out, y), recurrent)
        problems += _check(payload, fisher, hessian, "cold" if i == 0 else f"warm {i}")
        for _ in range(between):
            optimizer.zero_grad()
            task_loss(model(x), y).backward()
            optimizer.step()
    return problems


def _cross_entropy(out, y):
    return -torch.log_softmax(out, -1).gather(1, y[:, None]).mean()


def test_ln_mlp_fisher_and_hessian_within_tolerance_cold_and_warm():
    torch.manual_seed(0)
    model = MLP(5, 8, 2, 3, "layer").double().train()
    x, y = torch.randn(24, 5, dtype=torch.float64), torch.randint(0, 3, (24,))
    problems = _train_and_probe(model, (x, y), _cross_entropy, F.cross_entropy, "class", 0.5, False)
    assert not problems, problems


def test_ln_lstm_fisher_and_hessian_within_tolerance_cold_and_warm():
    torch.manual_seed(1)
    model = RecurrentNet(2, 4, 1, 3, "lstm", "layer", max_steps=5).double().train()
    x, y = torch.randn(8, 5, 2, dtype=torch.float64), torch.randint(0, 3, (8,))
    problems = _train_and_probe(
        model, (x, y), _cross_entropy, lambda out, y: F.cross_entropy(out[:, -1], y), "class", 0.5, True
    )
    assert not problems, problems


def test_digits_mse_full_batch_fisher_and_hessian_within_tolerance_cold_and_warm(settings):
    """The edge-of-stability preset's task and model (LN, full-batch GD at its lr 0.25), narrowed to 8
    hidden units and to its first CASES training cases (full-batch gradient descent on those), so that the
    dense references stay small (≈ 700 parameters) and quick."""
    from workers.engine.loop_setup import build_model
    from workers.engine.tasks import load_task

    spec = RunSpec(task="digits-mse", norm="layer", hidden_size=8, lr=0.25).resolved()
    data = load_task(spec, settings)
    torch.manual_seed(2)
    model = build_model(spec, data).double().train()
    x, y = data.train[0][:CASES].double(), data.train[1][:CASES].double()

    def mse(out, target):
        return ((out - target) ** 2).mean()

    problems = _train_and_probe(model, (x, y), mse, data.loss, "regression", 0.25, False, estimates=3)
    assert not problems, problems


def test_a_capped_estimate_reports_its_bound_and_stays_below():
    """A spread spectrum with no outlier, stopped at 3 vectors: not converged, its relative residual above
    the tolerance, and the Ritz value below λ_max by no more than that bound."""
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(60, 60, generator=gen, dtype=torch.float64))
    spectrum = torch.linspace(0.1, 1.0, 60, dtype=torch.float64)
    matrix = q @ torch.diag(spectrum) @ q.T
    start = [torch.randn(60, generator=gen, dtype=torch.float64)]
    theta, _, info = lanczos_top(lambda v: [matrix @ v[0]], start, 2, tol=TOL / 4, max_products=3)
    assert info["products"] == 3 and not info["converged"] and info["residual"] > TOL
    assert theta <= 1.0 + 1e-12
    theta, _, info = lanczos_top(lambda v: [matrix @ v[0]], start, 2, tol=TOL / 4, max_products=60)
    assert info["converged"] and 1.0 - theta <= info["residual"] * theta


def test_the_probe_flags_an_estimate_stopped_at_the_cap(monkeypatch):
    """With the cap at 2 vectors and the stopping rule out of reach, the payload carries the bound and,
    where it is above TOL, the lower-bound flag; the event contract reads both."""
    monkeypatch.setattr("workers.probes.curvature.MAX_VECTORS", 2)
    monkeypatch.setattr("workers.probes.curvature.STOP", 0.0)
    flagged = 0
    for seed in range(4):
        torch.manual_seed(seed)
        model = MLP(6, 12, 2, 4, "layer").double().train()
        x, y = torch.randn(32, 6, dtype=torch.float64), torch.randint(0, 4, (32,))
        probe = CurvatureProbe(model, Likelihood("class"), F.cross_entropy, hessian=True, seed=seed)
        payload, _ = probe.estimate(x, y, 0.1)
        event = FisherPayload.model_validate(payload)
        assert payload["lambda_vectors"] == {"lambda_max": 2, "hessian": 2}
        for key in ("lambda_max", "hessian_lambda_max"):
            assert payload[f"{key}_lower_bound"] == (payload[f"{key}_rel_bound"] > TOL)
        flagged += event.lambda_max_lower_bound + event.hessian_lambda_max_lower_bound
    assert flagged > 0
