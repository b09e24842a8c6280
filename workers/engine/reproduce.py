"""`reproduce(preset) -> dict`: train a preset's runs over seeds (in parallel processes) and judge its claims.

The aggregation (`normlab.cells`) and the claims (effect sizes, paired by seed, and the rules:
`normlab.claims`) are the same torch-free code the API's `GET /api/groups/{id}` uses; this module only
trains. Each (run, seed) trains in its own process with `threads` torch threads; `jobs` processes run at
once.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from normlab.cells import aggregate, trace_stats
from normlab.claims import curve_field, higher_is_better, judge_all, metric_key
from normlab.maps import map_points
from normlab.presets import PRESETS, Preset
from normlab.settings import Settings
from normlab.spec import RunSpec

__all__ = ["metric_key", "reproduce", "run_one"]


def run_one(spec: RunSpec, metric: str, settings: Settings, threads: int | None = 1) -> dict:
    """Train one spec; its status, final metric, validation curve [(step, value)], wall time and the
    hidden-state trace figures (normlab.cells.trace_stats)."""
    import torch

    from workers.engine import train

    if threads:
        torch.set_num_threads(threads)
    field = curve_field(metric)
    curve: list[tuple[int, float]] = []

    def emit(event) -> None:
        if event.kind == "scalars" and event.payload.get(field) is not None:
            curve.append((event.step, event.payload[field]))

    cpu = time.process_time()
    result = train(spec, emit, settings=settings)
    return {
        "seed": spec.seed,
        "status": str(result.status),
        "value": result.metrics.get(metric_key(metric)),
        "curve": curve,
        "wall_time": result.wall_time,
        "cpu_time": time.process_time() - cpu,
        "message": result.error,
        "traces": trace_stats(result.probes),
    }


def _worker_init(threads: int | None) -> None:
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)


def reproduce(
    preset: Preset | str,
    seeds: list[int] | None = None,
    steps: int | None = None,
    *,
    settings: Settings,
    threads: int | None = 1,
    jobs: int | None = None,
    progress: Callable[[str, int, dict], None] | None = None,
) -> dict:
    """Run every (run, seed) of a preset and return the side-by-side comparison as JSON-ready data.

    `settings` (the caller's, read at its edge) go to every run; `steps` overrides every run's steps;
    `threads` sets torch's intra-op threads per run (1 by default: small models on a shared machine);
    `jobs` runs that many at once in worker processes (default: the CPU count; 1 trains in this
    process); `progress(label, seed, record)` is called after each run.
    """
    preset = PRESETS[preset] if isinstance(preset, str) else preset
    seeds = list(preset.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    jobs = jobs or os.cpu_count() or 1
    start = time.perf_counter()
    specs = {
        label: (base if steps is None else base.model_copy(update={"steps": steps}))
        for label, base in zip(preset.run_labels(), preset.runs, strict=True)
    }
    work = [(label, seed) for seed in seeds for label in specs]  # seed-major: the first seeds finish first
    records: dict[tuple[str, int], dict] = {}
    if jobs == 1:
        for label, seed in work:
            records[label, seed] = run_one(
                specs[label].model_copy(update={"seed": seed}), preset.metric, settings, threads
            )
            if progress is not None:
                progress(label, seed, records[label, seed])
    else:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch thread pools
        with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_worker_init, initargs=(threads,)) as pool:
            futures = {
                pool.submit(
                    run_one, specs[label].model_copy(update={"seed": seed}), preset.metric, settings, threads
                ): (label, seed)
                for label, seed in work
            }
            for fut, key in futures.items():
                records[key] = fut.result()
                if progress is not None:
                    progress(key[0], key[1], records[key])
    cells = {
        label: aggregate(
            label,
            spec.resolved().model_dump(exclude={"seed", "probes"}),
            [records[label, s] for s in seeds],
            preset.metric,
        )
        for label, spec in specs.items()
    }
    return {
        "preset": preset.name,
        "title": preset.title,
        "paper_ref": preset.paper_ref,
        "expect": preset.expect,
        "setup": preset.setup,
        "metric": preset.metric,
        "higher_is_better": higher_is_better(preset.metric),
        "seeds": seeds,
        "steps": steps,
        "threads": threads,
        "jobs": jobs,
        "runs": list(cells.values()),
        "direction": judge_all(list(preset.claims), cells, preset.metric, preset.runs[0]),
        "map": map_points(preset.scale_map, cells, preset.metric) if preset.scale_map else None,
        "wall_time": time.perf_counter() - start,
        # CPU seconds of all runs ÷ jobs: the wall time on an otherwise idle machine (the shared one is not)
        "cpu_time": sum(r.get("cpu_time") or 0.0 for r in records.values()),
        "idle_wall_estimate": sum(r.get("cpu_time") or 0.0 for r in records.values()) / jobs,
    }
