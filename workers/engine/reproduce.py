"""`reproduce(preset) -> dict`: train a preset's runs over seeds (in parallel processes) and judge its claims.

The aggregation (`normlab.arms`) and the claims (effect sizes, paired by seed, and the rules:
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

from normlab.arms import SeedRecord, aggregate, trace_stats
from normlab.claims import curve_field, higher_is_better, judge_all, metric_key
from normlab.maps import map_points
from normlab.presets import PRESETS, Preset
from normlab.settings import Settings
from normlab.tuning import choose
from normlab_client.group_models import CellResult
from normlab_client.spec import RunSpec

__all__ = ["metric_key", "reproduce", "run_one"]


def run_one(spec: RunSpec, metric: str, settings: Settings, threads: int | None = 1) -> SeedRecord:
    """Train one spec; its status, final metric, validation curve [(step, value)], wall time and the
    hidden-state trace figures (normlab.arms.trace_stats)."""
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


def _train_all(
    work: list[tuple[str, int, RunSpec]],
    metric: str,
    settings: Settings,
    threads: int | None,
    jobs: int,
    progress: Callable[[str, int, SeedRecord], None] | None,
) -> list[SeedRecord]:
    """Train each (label, seed, spec) of `work`, `jobs` at a time; the records in `work`'s order."""
    records: list[SeedRecord] = []
    if jobs == 1:
        for label, seed, spec in work:
            records.append(run_one(spec, metric, settings, threads))
            if progress is not None:
                progress(label, seed, records[-1])
        return records
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked torch thread pools
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_worker_init, initargs=(threads,)) as pool:
        futures = [pool.submit(run_one, spec, metric, settings, threads) for _, _, spec in work]
        for fut, (label, seed, _) in zip(futures, work, strict=True):
            records.append(fut.result())
            if progress is not None:
                progress(label, seed, records[-1])
    return records


def _with(spec: RunSpec, **update) -> RunSpec:
    # validated, not model_copy'd: a value the spec refuses fails here, not in a worker
    return RunSpec(**{**spec.model_dump(exclude_unset=True), **update})


def _arms(
    preset: Preset, specs: dict[str, RunSpec], records: dict[tuple[str, int], SeedRecord], seeds: list[int]
) -> dict[str, CellResult]:
    return {
        label: aggregate(
            label,
            spec.resolved().model_dump(exclude={"seed", "probes"}),
            [records[label, s] for s in seeds],
            preset.metric,
        )
        for label, spec in specs.items()
    }


def _judged(preset: Preset, arms: dict[str, CellResult]) -> dict:
    """The arms' JSON, the claims judged on them ("direction") and the preset's map over them."""
    return {
        "runs": [c.model_dump() for c in arms.values()],
        "direction": judge_all(
            list(preset.claims), arms, preset.metric, preset.runs[0], preset=preset.name
        ).model_dump(),
        "map": map_points(preset.scale_map, arms, preset.metric).model_dump() if preset.scale_map else None,
    }


def _tuning_units(preset: Preset) -> dict[str, str]:
    """Run label -> the name its tuned value is chosen under: the label itself, or for a map tuned per
    side the side's normalizer (one value for all its axis points)."""
    m = preset.scale_map
    if preset.tuning is not None and preset.tuning.per == "side" and m is not None:
        return {m.label(side, v): side for side in (m.a, m.b) for v in m.values}
    return {label: label for label in preset.run_labels()}


def reproduce(
    preset: Preset | str,
    seeds: list[int] | None = None,
    steps: int | None = None,
    *,
    settings: Settings,
    threads: int | None = 1,
    jobs: int | None = None,
    progress: Callable[[str, int, SeedRecord], None] | None = None,
    tune: bool = False,
    fresh_seeds: list[int] | None = None,
) -> dict:
    """Run every (run, seed) of a preset and return the side-by-side comparison as JSON-ready data.

    `settings` (the caller's, read at its edge) go to every run; `steps` overrides every run's steps;
    `threads` sets torch's intra-op threads per run (1 by default: small models on a shared machine);
    `jobs` runs that many at once in worker processes (default: the CPU count; 1 trains in this
    process); `progress(label, seed, record)` is called after each run.

    `tune`: first train every run at each value of the preset's tuning grid on its tuning seeds and choose
    each run's value by its rule (normlab.tuning); the runs, claims and map then come from the verdict
    seeds at the chosen values, and "same_hyperparameters" holds the preset's own setting judged on the
    same verdict seeds (a run whose chosen value is its own setting trains once).

    `fresh_seeds`: seeds drawn at run time (normlab.replication.draw_fresh_seeds) that train beside the
    verdict seeds; "fresh" holds their arms, claims and map judged on their own (the replication).
    """
    preset = PRESETS[preset] if isinstance(preset, str) else preset
    seeds = list(preset.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    tuning = preset.tuning if tune else None
    if tune and tuning is None:
        raise ValueError(f"preset {preset.name!r} declares no tuning rule")
    if tuning is not None and set(tuning.seeds) & set(seeds):
        raise ValueError(f"the tuning seeds {list(tuning.seeds)} must not be verdict seeds")
    fresh = list(fresh_seeds or [])
    if set(fresh) & set(seeds):
        raise ValueError("fresh seeds must differ from the verdict seeds")
    jobs = jobs or os.cpu_count() or 1
    start = time.perf_counter()
    base = {
        label: (spec if steps is None else spec.model_copy(update={"steps": steps}))
        for label, spec in zip(preset.run_labels(), preset.runs, strict=True)
    }
    cpu = 0.0
    tuned = None
    specs = base
    if tuning is not None:
        grid = [
            (f"{label} {tuning.field}={value:g}", seed, _with(spec, **{tuning.field: value}, seed=seed))
            for label, spec in base.items()
            for value in tuning.grid
            for seed in tuning.seeds
        ]
        got = _train_all(grid, preset.metric, settings, threads, jobs, progress)
        cpu += sum(r.get("cpu_time") or 0.0 for r in got)
        unit = _tuning_units(preset)
        finals: dict[str, dict[float, list]] = {unit[label]: {} for label in base}
        it = iter(got)
        for label in base:
            for value in tuning.grid:
                finals[unit[label]].setdefault(value, []).extend(next(it).get("value") for _ in tuning.seeds)
        tuned = {**tuning.public(preset.metric), **choose(tuning, finals, preset.metric)}
        tuned["cpu_time"] = sum(r.get("cpu_time") or 0.0 for r in got)
        specs = {
            label: _with(spec, **{tuning.field: tuned["chosen"][unit[label]]}) for label, spec in base.items()
        }
    # seed-major: the first seeds finish first; a spec and seed wanted twice (the chosen value is the
    # preset's own) trains once
    wanted: dict[tuple[str, int], RunSpec] = {}
    for seed in seeds + fresh:
        for label in specs:
            wanted[label, seed] = specs[label].model_copy(update={"seed": seed})
            if tuning is not None:
                wanted[f"same: {label}", seed] = base[label].model_copy(update={"seed": seed})
    unique: dict[str, tuple[str, int, RunSpec]] = {}
    for (label, seed), spec in wanted.items():
        unique.setdefault(spec.resolved().model_dump_json(), (label, seed, spec))
    got = _train_all(list(unique.values()), preset.metric, settings, threads, jobs, progress)
    cpu += sum(r.get("cpu_time") or 0.0 for r in got)
    by_spec = dict(zip(unique, got, strict=True))
    records = {key: by_spec[spec.resolved().model_dump_json()] for key, spec in wanted.items()}
    arms = _arms(preset, specs, records, seeds)
    out = {
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
        **_judged(preset, arms),
        "tuning": tuned,
        "same_hyperparameters": None,
        "fresh": _judged(preset, _arms(preset, specs, records, fresh)) | {"seeds": fresh} if fresh else None,
        "wall_time": time.perf_counter() - start,
        # CPU seconds of all runs ÷ jobs: the wall time on an otherwise idle machine (the shared one is not)
        "cpu_time": cpu,
        "idle_wall_estimate": cpu / jobs,
    }
    if tuning is not None:
        same = _arms(
            preset,
            base,
            {(k[0].removeprefix("same: "), k[1]): r for k, r in records.items() if k[0].startswith("same: ")},
            seeds,
        )
        out["same_hyperparameters"] = {
            "runs": [c.model_dump() for c in same.values()],
            "direction": judge_all(
                list(preset.claims), same, preset.metric, preset.runs[0], preset=preset.name
            ).model_dump(),
        }
    return out
