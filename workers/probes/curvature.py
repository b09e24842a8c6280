"""`CurvatureProbe.estimate(x, y, lr)`: one `fisher` payload (without costs), keeping state between calls.

State carried across estimates: the previous top eigenvectors of F and H (warm starts), an EMA of the
summed-gradient traces (they are noisier), and estimators switched off after they failed once.

λ_max by Lanczos (`workers.probes.eigen`): at least `power_iterations` Krylov vectors, then on until the
relative Ritz residual r/θ is ≤ STOP (a quarter of TOL, the stated tolerance: the bound in
`workers.probes.eigen`, the quarter at STOP below), at most MAX_VECTORS, the last one at the cap by its
Jacobian-vector product alone (the Fisher). An estimate whose bound is still above TOL there is a lower
bound: the payload says so (`lambda_max_lower_bound`) with the bound it reached (`lambda_max_rel_bound`,
r/θ), and the same for the Hessian (`hessian_lambda_max_…`). Start: where the predictions
are a Linear layer's outputs (feed-forward and conv nets), the output layer's own Fisher block gives a
direction q0 and its F q0 for one vjp (`workers.probes.start`); elsewhere (recurrent nets) the
sampled-label gradient ∇S (free: the trace pass computes it, its covariance is N·F). Warm, the best
combination of that vector and the previous Ritz vector (Rayleigh–Ritz: a Jacobian-vector product each, the
combination's F u one vjp); cold, the vector itself. The Hessian starts from its previous Ritz vector, cold
from a random one drawn from the probes' seeded generator.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from workers.probes.eigen import lanczos_top
from workers.probes.fisher import FisherPass, Layout, RecordedForward, module_traces
from workers.probes.likelihood import Likelihood
from workers.probes.start import best_start, output_layer_start
from workers.probes.weight_sets import WeightSet, find_weight_sets, weight_set_payload

TOL = 0.02  # the stated tolerance: an estimate whose bound r/θ is above it is flagged as a lower bound
# Lanczos goes on to r/θ ≤ STOP: a Ritz value can sit at the second of two eigenvalues a few % apart with
# r/θ under TOL (3.8 % low at 1.2 %, on a tiny RMS-norm MLP); at TOL/4 the Krylov space had split them
STOP = TOL / 4
MAX_VECTORS = 16  # Krylov vectors at most per λ_max, cold or warm; the bound reached there is reported
EMA = 0.5  # weight of the newest summed-gradient trace
ALONG_ROWS = (
    "uᵀFu for u = Σ_i r_i v_i/‖v_i‖ (random signs r_i; every row's direction at once), "
    "normalized by ‖u‖², from one Jacobian-vector product"
)
EMPIRICAL_NOTE = (
    "empirical Fisher: gradients at the observed labels. Not a curvature estimate "
    "(Kunstner, Hennig & Balles 2019); shown only for comparison with the true Fisher."
)


def _nonzero(vector) -> bool:
    return vector is not None and any(bool(t.abs().sum() > 0) for t in vector)


def _quadratic(fp: FisherPass | None):
    """q ↦ qᵀFq for a unit q from one Jacobian-vector product (exact, or central differences on the fused
    LSTM path)."""
    if fp is None:
        return None
    return lambda q: fp.curvature_along(q, unit=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class CurvatureProbe:
    """True-Fisher traces, λ_max(F), optional λ_max(H) and empirical Fisher, scale-invariant sets."""

    def __init__(
        self,
        model: nn.Module,
        likelihood: Likelihood,
        loss_fn,
        *,
        power_iterations: int = 2,
        hessian: bool = False,
        empirical: bool = False,
        seed: int = 0,
        clock=time.perf_counter,
    ):
        self.model, self.lik, self.loss_fn = model, likelihood, loss_fn
        self.clock = clock  # the seconds per estimator are on the prober's clock (CPU time on a CPU)
        self.power_iterations, self.hessian, self.empirical = power_iterations, hessian, empirical
        self.weight_sets: list[WeightSet] = find_weight_sets(model)
        self.layout = Layout.of(model)  # the model's structure, shared by every estimate's pass
        self.named = dict(model.named_parameters())  # the same tensors all run (the optimizer's)
        device = next(model.parameters()).device
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed + 0x5EED)
        self.eig: list | None = None
        self.heig: list | None = None
        self.ema: dict[str, float] = {}
        self.failed: dict[str, str] = {}
        self.iterations: dict[str, int] = {}  # products since the cold start, per operator
        self.residuals: dict[str, float] = {}  # relative Ritz residual of the latest λ, per operator
        self.vectors: dict[str, int] = {}  # Krylov vectors the latest λ took, per operator
        self.workspace: dict[str, dict] = {}  # Lanczos' basis matrix per operator, kept between estimates

    def _random(self, params) -> list:
        return [
            torch.randn(p.shape, generator=self.generator, device=p.device, dtype=p.dtype) for p in params
        ]

    def recording(self, x) -> RecordedForward | None:
        """A recorder for the training forward over x whose estimate follows (None where it cannot serve,
        then `estimate` runs a forward pass of its own); see `workers.probes.fisher.RecordedForward`."""
        if not RecordedForward.applies(self.model):
            return None
        return RecordedForward(self.model, self.layout, x.shape[0])

    def estimate(
        self, x, y, lr: float, recorded: RecordedForward | None = None, outputs=None
    ) -> tuple[dict, dict[str, float]]:
        """(payload, seconds per estimator) for this batch at the current parameters; `recorded` and
        `outputs`: the training step's own forward pass over x, its graph kept (no forward pass here)."""
        seconds: dict[str, float] = {}
        t0 = self.clock()
        fp = FisherPass(
            self.model,
            self.lik,
            x,
            y,
            self.loss_fn,
            layout=self.layout,
            recorded=recorded,
            outputs=outputs,
        )
        probs = None if self.lik.gaussian else fp.probs
        stats, est, grad_s = fp.sampled(self.lik.sampled_residual(fp.pred, self.generator, probs))
        scale = 1.0 / fp.n
        raw, kinds = module_traces(stats, est, scale)
        trace = {}
        for mod, value in raw.items():
            if kinds[mod] == "summed-gradient":
                value = EMA * value + (1 - EMA) * self.ema.get(mod, value)
                self.ema[mod] = value
            trace[mod] = value
        params = self.named
        weight_sets = [weight_set_payload(g, params, stats, est, scale, lr) for g in self.weight_sets]
        for entry, weight_set in zip(weight_sets, self.weight_sets, strict=True):
            if weight_set.normalizer == "weight":
                entry["along_w_curvature"] = self._along_rows(fp, params[weight_set.param], weight_set.param)
                entry["along_w_measure"] = ALONG_ROWS
        _sync(self.device)
        seconds["trace"] = self.clock() - t0
        payload: dict = {
            "trace": trace,
            "trace_raw": raw,
            "trace_estimator": kinds,
            "trace_smoothing": f"summed-gradient layers: EMA, weight {EMA} on the newest",
            "predictions": fp.n,
            "lambda_max": None,
            "eta_lambda_max": None,
            "hessian_lambda_max": None,
            "eta_hessian_lambda_max": None,
            "lambda_tolerance": TOL,
            "weight_sets": weight_sets,
            "empirical": None,
            "lr": lr,
        }
        payload["lambda_max"], seconds["lambda_max"], self.eig = self._top(
            "lambda_max", fp.fvp, fp.params, self.eig, grad_s, fp=fp
        )
        if payload["lambda_max"] is not None:
            payload["eta_lambda_max"] = lr * payload["lambda_max"]
        if self.hessian and self.loss_fn is not None:
            payload["hessian_lambda_max"], seconds["hessian"], self.heig = self._top(
                "hessian", fp.hvp, fp.params, self.heig
            )
            if payload["hessian_lambda_max"] is not None:
                payload["eta_hessian_lambda_max"] = lr * payload["hessian_lambda_max"]
        if self.empirical:
            t1 = self.clock()
            e_stats, e_est, _ = fp.sampled(self.lik.observed_residual(fp.pred, fp.tgt))
            e_trace, e_kinds = module_traces(e_stats, e_est, scale)
            payload["empirical"] = {"trace": e_trace, "trace_estimator": e_kinds, "note": EMPIRICAL_NOTE}
            _sync(self.device)
            seconds["empirical"] = self.clock() - t1
        for key, name in (("lambda_max", "lambda_max"), ("hessian_lambda_max", "hessian")):
            if payload[key] is not None:
                payload[f"{key}_rel_bound"] = self.residuals[name]
                payload[f"{key}_lower_bound"] = self.residuals[name] > TOL
        payload["power_iterations_total"] = dict(self.iterations)
        payload["lambda_vectors"] = dict(self.vectors)
        payload["lambda_residual"] = dict(self.residuals)
        payload["products"] = "central differences (fused LSTM path)" if fp.fused else "double backward"
        if self.failed:
            payload["errors"] = dict(self.failed)
        del fp
        return payload, seconds

    def _along_rows(self, fp: FisherPass, param, name: str) -> float:
        """WeightNorm rows: the curvature along a random signed sum of the row directions, measured."""
        w = param.detach().reshape(param.shape[0], -1)
        signs = torch.randint(0, 2, (w.shape[0], 1), generator=self.generator, device=w.device) * 2 - 1
        u = (signs * w / w.norm(dim=1, keepdim=True).clamp_min(1e-30)).reshape(param.shape)
        return fp.curvature_along(
            [u if n == name else torch.zeros_like(p) for n, p in zip(fp.names, fp.params, strict=True)]
        )

    def _top(self, name: str, product, params, previous, start=None, fp: FisherPass | None = None):
        """(λ, seconds, Ritz vector) by Lanczos, warm-started; (None, …) if the product failed.

        With `fp` (the Fisher): the last Krylov vector takes a Jacobian-vector product only. The start:
        the output layer's block (`workers.probes.start`) where the model has one, else `start` (∇S);
        warm, the best combination of it and the previous Ritz vector."""
        if name in self.failed:
            return None, 0.0, previous
        t0 = self.clock()
        cold = previous is None
        init, first = previous, None
        try:
            found = output_layer_start(fp) if fp is not None else None
            if found is None and fp is not None and not cold and _nonzero(start):  # ∇S as the new vector
                found = (dict(zip(fp.names, start, strict=True)), fp.jv(start))
            if found is not None:  # with the previous vector (warm): the better combination of the two
                init, first = best_start(fp, found, previous)
            elif cold and _nonzero(start):
                init = [t.detach() for t in start]
            elif cold:
                init = self._random(params)
            lam, vec, info = lanczos_top(
                product,
                init,
                self.power_iterations,
                tol=STOP,
                max_products=MAX_VECTORS,
                start_product=first,
                quadratic=_quadratic(fp),
                workspace=self.workspace.setdefault(name, {}),
            )
        except RuntimeError as exc:  # e.g. no double backward for a fused kernel on this device
            self.failed[name] = f"{type(exc).__name__}: {exc}"[:300]
            return None, self.clock() - t0, previous
        self.iterations[name] = self.iterations.get(name, 0) + info["products"]
        self.residuals[name] = info["residual"]
        self.vectors[name] = info["products"]
        _sync(self.device)
        return lam, self.clock() - t0, vec
