"""`CurvatureProbe.estimate(x, y, lr)`: one `fisher` payload (without costs), keeping state between calls.

State carried across estimates: the previous top eigenvectors of F and H (warm starts), an EMA of the
summed-gradient traces (they are noisier), and estimators switched off after they failed once.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from workers.probes.fisher import FisherPass, module_traces, power_iteration
from workers.probes.groups import Group, find_groups, group_payload
from workers.probes.likelihood import Likelihood

COLD_EXTRA = 2  # extra power iterations from a random start; later estimates continue from the last
# eigenvector, so the iteration keeps converging across estimates while the weights drift slowly
EMA = 0.5  # weight of the newest summed-gradient trace
EMPIRICAL_NOTE = ("empirical Fisher: gradients at the observed labels. Not a curvature estimate "
                  "(Kunstner, Hennig & Balles 2019); shown only for comparison with the true Fisher.")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CurvatureProbe:
    """True-Fisher traces, λ_max(F), optional λ_max(H) and empirical Fisher, scale-invariant groups."""

    def __init__(self, model: nn.Module, likelihood: Likelihood, loss_fn, *, power_iterations: int = 2,
                 hessian: bool = False, empirical: bool = False, seed: int = 0):
        self.model, self.lik, self.loss_fn = model, likelihood, loss_fn
        self.power_iterations, self.hessian, self.empirical = power_iterations, hessian, empirical
        self.groups: list[Group] = find_groups(model)
        device = next(model.parameters()).device
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed + 0x5EED)
        self.eig: list | None = None
        self.heig: list | None = None
        self.ema: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        self.iterations: dict[str, int] = {}  # power iterations since the cold start, per operator

    def _random(self, params) -> list:
        return [torch.randn(p.shape, generator=self.generator, device=p.device, dtype=p.dtype)
                for p in params]

    def estimate(self, x, y, lr: float) -> tuple[dict, dict[str, float]]:
        """(payload, seconds per estimator) for this batch at the current parameters."""
        seconds: dict[str, float] = {}
        t0 = time.perf_counter()
        fp = FisherPass(self.model, self.lik, x, y, self.loss_fn)
        stats, est, _ = fp.sampled(self.lik.sampled_residual(fp.pred, self.generator))
        scale = 1.0 / fp.n
        raw, kinds = module_traces(stats, est, scale)
        trace = {}
        for mod, value in raw.items():
            if kinds[mod] == "summed-gradient":
                value = EMA * value + (1 - EMA) * self.ema.get(mod, value)
                self.ema[mod] = value
            trace[mod] = value
        params = dict(self.model.named_parameters())
        groups = [group_payload(g, params, stats, est, scale, lr) for g in self.groups]
        _sync(self.device)
        seconds["trace"] = time.perf_counter() - t0
        payload: dict = {"trace": trace, "trace_raw": raw, "trace_estimator": kinds,
                         "trace_smoothing": f"summed-gradient layers: EMA, weight {EMA} on the newest",
                         "predictions": fp.n, "lambda_max": None, "eta_lambda_max": None,
                         "hessian_lambda_max": None, "eta_hessian_lambda_max": None,
                         "groups": groups, "empirical": None, "lr": lr}
        payload["lambda_max"], seconds["lambda_max"], self.eig = self._top(
            "lambda_max", fp.fvp, fp.params, self.eig)
        if payload["lambda_max"] is not None:
            payload["eta_lambda_max"] = lr * payload["lambda_max"]
        if self.hessian and self.loss_fn is not None:
            payload["hessian_lambda_max"], seconds["hessian"], self.heig = self._top(
                "hessian", fp.hvp, fp.params, self.heig)
            if payload["hessian_lambda_max"] is not None:
                payload["eta_hessian_lambda_max"] = lr * payload["hessian_lambda_max"]
        if self.empirical:
            t1 = time.perf_counter()
            e_stats, e_est, _ = fp.sampled(self.lik.observed_residual(fp.pred, fp.tgt))
            e_trace, e_kinds = module_traces(e_stats, e_est, scale)
            payload["empirical"] = {"trace": e_trace, "trace_estimator": e_kinds, "note": EMPIRICAL_NOTE}
            _sync(self.device)
            seconds["empirical"] = time.perf_counter() - t1
        payload["power_iterations_total"] = dict(self.iterations)
        if self.failed:
            payload["errors"] = dict(self.failed)
        del fp
        return payload, seconds

    def _top(self, name: str, product, params, previous):
        """(λ, seconds, eigenvector) by power iteration, warm-started; (None, …) if the product failed."""
        if name in self.failed:
            return None, 0.0, previous
        t0 = time.perf_counter()
        cold = previous is None
        init = self._random(params) if cold else previous
        iterations = self.power_iterations + (COLD_EXTRA if cold else 0)
        self.iterations[name] = self.iterations.get(name, 0) + iterations
        try:
            lam, vec = power_iteration(product, init, iterations)
        except RuntimeError as exc:  # e.g. no double backward for a fused kernel on this device
            self.failed[name] = f"{type(exc).__name__}: {exc}"[:300]
            return None, time.perf_counter() - t0, previous
        _sync(self.device)
        return lam, time.perf_counter() - t0, vec
