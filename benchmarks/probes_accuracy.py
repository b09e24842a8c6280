"""`normlab bench probes --accuracy`: how far the prober's λ_max(F) is from a converged one, cold and warm.

Per task and seed, the task's default model trains; at each checkpoint step (the loop's state after the
step's backward, as the prober sees it) a converged λ_max of that batch's Fisher is computed (Lanczos from
a random start until the relative Ritz residual is ≤ 1e-6, at most 40 products) and compared with
- cold: a fresh `CurvatureProbe`'s first estimate on the same batch;
- warm: the estimate of one probe that carried its vector from the previous checkpoint (the default
  cadence puts estimates ~50 steps apart).
Reported: 1 − estimate / converged (positive = below), median and largest over checkpoints and seeds.
"""

from __future__ import annotations

import statistics

import torch

from normlab.settings import Settings

REFERENCE_TOL, REFERENCE_PRODUCTS = 1e-6, 40
CHECKPOINTS = (5, 55, 105, 205)
SEEDS = 2


def lambda_errors(
    task: str, norm: str, settings: Settings, checkpoints=CHECKPOINTS, seeds: int = SEEDS
) -> dict:
    """{"cold": [...], "warm": [...], "cold_vectors": [...]}: relative errors below the converged λ_max."""
    from normlab_client.spec import RunSpec
    from workers.engine.loop_setup import build_model, make_optimizer, seed_everything
    from workers.engine.options import EngineOptions
    from workers.engine.tasks import load_task
    from workers.engine.tasks.base import seeded
    from workers.probes.curvature import CurvatureProbe
    from workers.probes.eigen import lanczos_top
    from workers.probes.fisher import FisherPass
    from workers.probes.likelihood import Likelihood

    out: dict[str, list] = {"cold": [], "warm": [], "cold_vectors": []}
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
            start = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in fp.params]
            converged, _, _ = lanczos_top(
                fp.fvp, start, 2, tol=REFERENCE_TOL, max_products=REFERENCE_PRODUCTS
            )
            del fp
            fresh = CurvatureProbe(
                model, lik, data.loss, power_iterations=spec.probes.power_iterations, seed=seed
            )
            payload, _ = fresh.estimate(x, y, spec.lr)
            out["cold"].append(1 - payload["lambda_max"] / converged)
            out["cold_vectors"].append(payload["power_iterations_total"]["lambda_max"])
            if carried is None:
                carried = fresh
            else:
                payload, _ = carried.estimate(x, y, spec.lr)
                out["warm"].append(1 - payload["lambda_max"] / converged)
    return out


def summary(errors: dict) -> dict:
    return {
        key: {"median": statistics.median(v), "max": max(v), "min": min(v), "n": len(v)}
        for key, v in errors.items()
        if v
    }
