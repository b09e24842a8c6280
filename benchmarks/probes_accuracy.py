"""`normlab bench probes --accuracy`: how far the prober's λ_max(F) and λ_max(H) are from converged ones.

Per task and seed, the task's default model trains; at each checkpoint step (the loop's state after the
step's backward, as the prober sees it) a converged λ_max of that batch's Fisher and of its loss Hessian
is computed (Lanczos from a random start until the relative Ritz residual is ≤ 1e-6, at most 60 products)
and compared with
- cold: a fresh `CurvatureProbe`'s first estimate on the same batch;
- warm: the estimate of one probe that carried its vectors from the previous checkpoint (the default
  cadence puts estimates ~50 steps apart).
Reported: 1 − estimate / converged (positive = below), median and largest over checkpoints and seeds, the
Krylov vectors each took, and how many the probe flagged as lower bounds (payloads without the flag: 0).
"""

from __future__ import annotations

import statistics

import torch

from normlab.settings import Settings

REFERENCE_TOL, REFERENCE_PRODUCTS = 1e-6, 60
CHECKPOINTS = (5, 55, 105, 205)
SEEDS = 2


def lambda_errors(
    task: str, norm: str, settings: Settings, checkpoints=CHECKPOINTS, seeds: int = SEEDS
) -> dict:
    """{"cold": [...], "warm": [...], "cold_vectors": [...], …, "hessian_cold": [...], …}: relative errors
    below the converged λ_max, the vectors taken, the lower-bound flags (1 or 0)."""
    from normlab_client.spec import RunSpec
    from workers.engine.loop_setup import build_model, make_optimizer, seed_everything
    from workers.engine.options import EngineOptions
    from workers.engine.tasks import load_task
    from workers.engine.tasks.base import seeded
    from workers.probes.curvature import CurvatureProbe
    from workers.probes.eigen import lanczos_top
    from workers.probes.fisher import FisherPass
    from workers.probes.likelihood import Likelihood

    out: dict[str, list] = {
        f"{h}{k}": []
        for h in ("", "hessian_")
        for k in ("cold", "warm", "cold_vectors", "warm_vectors", "flagged")
    }
    for seed in range(seeds):
        spec = RunSpec(task=task, norm=norm).resolved()
        data = load_task(spec, settings)
        seed_everything(seed)
        model = build_model(spec, data, EngineOptions.from_settings(settings))
        optimizer = make_optimizer(spec, model)
        batches = data.train_batches(spec.batch_size, seeded(seed, 4))
        lik = Likelihood(data.info.target)
        gen = torch.Generator().manual_seed(seed)
        carried: CurvatureProbe | None = None
        step = 0
        for checkpoint in checkpoints:
            while step < checkpoint:
                x, y = next(batches)
                optimizer.zero_grad()
                data.loss(model(x), y).backward()
                optimizer.step()
                step += 1
            x, y = next(batches)
            optimizer.zero_grad()
            data.loss(model(x), y).backward()  # .grad as the prober finds it after the step's backward
            fp = FisherPass(model, lik, x, y, data.loss)
            fp.sampled(lik.sampled_residual(fp.pred, gen))
            converged = {}
            for key, product in (("lambda_max", fp.fvp), ("hessian", fp.hvp)):
                start = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in fp.params]
                converged[key] = lanczos_top(
                    product, start, 2, tol=REFERENCE_TOL, max_products=REFERENCE_PRODUCTS
                )[0]
            del fp
            fresh = CurvatureProbe(
                model, lik, data.loss, power_iterations=spec.probes.power_iterations, hessian=True, seed=seed
            )
            _record(out, "cold", fresh.estimate(x, y, spec.lr)[0], converged, {})
            if carried is None:
                carried = fresh
            else:
                before = dict(carried.iterations)  # products so far: the estimate's own are the difference
                _record(out, "warm", carried.estimate(x, y, spec.lr)[0], converged, before)
    return out


def _record(out: dict, when: str, payload: dict, converged: dict, before: dict) -> None:
    """One estimate's errors, vectors (its probe's running total less `before`) and flags, for the Fisher
    and the Hessian."""
    for key, name, prefix in (
        ("lambda_max", "lambda_max", ""),
        ("hessian_lambda_max", "hessian", "hessian_"),
    ):
        out[f"{prefix}{when}"].append(1 - payload[key] / converged[name])
        out[f"{prefix}{when}_vectors"].append(payload["power_iterations_total"][name] - before.get(name, 0))
        out[f"{prefix}flagged"].append(int(bool(payload.get(f"{key}_lower_bound"))))


def summary(errors: dict) -> dict:
    return {
        key: {"median": statistics.median(v), "max": max(v), "min": min(v), "n": len(v)}
        for key, v in errors.items()
        if v
    }
