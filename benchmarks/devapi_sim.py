"""The stand-in API's synthetic training (benchmarks/devapi.py): a run's events drawn from a formula, in
the shapes the real worker emits (client/normlab_client/events.py payloads), at a rate the front end can
be tested at."""

from __future__ import annotations

import asyncio
import math
import random
import time
from datetime import UTC, datetime
from typing import Any

from normlab_client.events import RunStatus


async def train(api: Any, rid: str) -> None:
    """Run `rid` of `api` (a DevAPI): curves from a formula, one scalars event every 1/api.rate s, hidden
    and fisher snapshots on the spec's probe schedule, then the worker's summary and `completed`."""
    run = api.runs[rid]
    spec = run["spec"]
    rng = random.Random(spec["seed"] * 7919 + len(api.runs))
    steps, log_every = spec["steps"], max(1, spec["steps"] // 1000)
    speed = {"layer": 1.0, "batch": 0.8, "rms": 0.95, "weight": 0.7, "none": 0.5}.get(spec["norm"], 0.6)
    run["status"], run["started_at"] = RunStatus.RUNNING, datetime.now(UTC).isoformat()
    api._emit(rid, "status", 0, {"status": RunStatus.RUNNING})
    t0 = time.time()
    probes = spec["probes"]["enabled"]
    T = spec.get("seq_len") or 12
    series: list[dict[str, Any]] = []
    for step in range(log_every, steps + 1, log_every):
        await asyncio.sleep(1.0 / api.rate)
        if run["status"] == RunStatus.CANCELLED:
            api._emit(rid, "status", step, {"status": RunStatus.CANCELLED, "message": "cancelled"})
            return
        loss = 2.3 * math.exp(-speed * step / (0.3 * steps)) + 0.05 + 0.03 * rng.random()
        evaluate = step % spec["eval_every"] < log_every or step + log_every > steps
        api._emit(
            rid,
            "scalars",
            step,
            {
                "train_loss": loss,
                "val_loss": loss * 1.1 if evaluate else None,
                "accuracy": 1 - loss / 2.5 if evaluate else None,
                "bpc": None,
                "grad_norm": 1.0,
                "lr": spec["lr"],
                "steps_per_s": api.rate * log_every,
                "elapsed": time.time() - t0,
            },
        )
        if probes and step % spec["probes"]["trace_every"] < log_every:
            growth = 1.0 if spec["norm"] == "layer" else 1.08
            api._emit(
                rid,
                "hidden",
                step,
                {
                    "hidden_norms": [3 * growth**t * (1 + 0.1 * rng.random()) for t in range(T)],
                    "grad_norms": [0.01 * growth ** (T - t) for t in range(T)],
                    "summed_mean": [0.0] * T,
                    "summed_std": [1.0] * T,
                    "time_steps": T,
                },
            )
        if probes and step % spec["probes"]["fisher_every"] < log_every:
            wn = 1 + step / steps
            # the summary's per-estimate series (what a group's hidden-state figures are computed
            # from): η·λ_max(H) rising to the edge of stability at 2 when the spec asks for the Hessian
            sharp = 2.0 * (1 - math.exp(-5 * step / steps)) * (1 + 0.03 * rng.gauss(0, 1))
            series.append(
                {
                    "eta_hessian_lambda_max": sharp if spec["probes"].get("hessian") else None,
                    "weight_sets": [{"name": "rnn.0.ih.weight", "effective_lr": spec["lr"] / wn**2}],
                }
            )
            api._emit(
                rid,
                "fisher",
                step,
                {
                    # the engine's module names for a one-layer LSTM (workers/engine/models.py)
                    "trace": {"rnn.0.ih": 10 / wn, "rnn.0.hh": 5 / wn, "out": 2 / wn},
                    "trace_estimator": {
                        "rnn.0.ih": "per-sample",
                        "rnn.0.hh": "summed-gradient",
                        "out": "per-sample",
                    },
                    "lambda_max": 100 / wn,
                    "eta_lambda_max": spec["lr"] * 100 / wn,
                    "hessian_lambda_max": None,
                    "groups": [
                        {
                            "name": "rnn.0.ih.weight",
                            "weight_norm": wn,
                            "along_w_curvature": 1e-9,
                            "trace_ww": 1.0,
                            "scaled_trace_ww": 1.0,
                            "gain_curvature": 0.5,
                            "effective_lr": spec["lr"] / wn**2,
                            "angular_update": 0.01,
                        }
                    ],
                    "cost_steps": 0.5,
                    "empirical": None,
                },
            )
    # the worker's summary shape (workers/jobs.py): final metrics per split, steps and wall time
    run["summary"] = {
        "metrics": {
            "train_loss": loss,
            "val_loss": loss * 1.1,
            "val_accuracy": 1 - loss / 2.5,
            "test_loss": loss * 1.12,
            "test_accuracy": 1 - loss / 2.4,
        },
        "step": steps,
        "wall_time": time.time() - t0,
        "probes": {"fisher_series": series} if probes else None,
    }
    run["status"], run["finished_at"] = RunStatus.COMPLETED, datetime.now(UTC).isoformat()
    api._emit(rid, "status", steps, {"status": RunStatus.COMPLETED, "metrics": run["summary"]["metrics"]})
