"""`normlab bench fork [--json] [--pairs N] [--repeats N] [--steps N]`: what forks cost, side by side in
one run.

- checkpoint overhead: the same run (each task's default model) trained with checkpoints at the default
  cadence (normlab.checkpoints.schedule: the first step, every ceil(steps / 10) steps and the last) and
  without, in alternating pairs; the overhead is the median paired ratio of their training times minus
  one (target ≤ 3 %), beside the same ratio of the process's CPU time (the writer thread's included,
  and far less disturbed by other work on the machine than the wall clock);
- checkpoint bytes: one checkpoint of each task's default model after a step (Adam's moments exist
  then) and a run's worth at the default cadence (at most 12 of them), before any retention cap;
- fork → child's first point: on a warm `normlab up` (temporary data directory, one worker), POST
  /api/runs/{id}/fork → the child's first `scalars` event on its SSE stream, median of --repeats,
  beside a fresh run's submit → first point measured in the same session (target ≤ 1 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from normlab import checkpoints
from normlab.settings import Settings
from normlab_client.catalog import TASKS, task_availability
from normlab_client.spec import RunSpec

TARGETS = {"checkpoint_overhead": 0.03, "fork_first_point_median_s": 1.0}
OVERHEAD_TASKS = ("digits", "seq-digits", "conv-digits")  # MLP, LSTM, ConvNet
RUN = {"task": "digits", "norm": "layer", "batch_size": 4}  # the demo's run (bench demo)
PER_RUN = 12  # checkpoints a run keeps at most at the default cadence: its first, ten, and its last


def checkpoint_overhead(
    settings: Settings, pairs: int, steps: int | None, tasks: list[str] | None = None
) -> dict:
    """{task: {"with_s", "without_s", "overhead"}}: paired training times, alternating which goes first."""
    from workers.engine import train

    out = {}
    for task in [t for t in OVERHEAD_TASKS if tasks is None or t in tasks]:
        spec = RunSpec(task=task, device="cpu", **({"steps": steps} if steps else {}))
        ratios, cpu_ratios, with_s, without_s, taken = [], [], [], [], []
        train(spec, settings=settings)  # warm: data loaded, kernels built
        for i in range(pairs):
            order = [True, False] if i % 2 == 0 else [False, True]
            times, cpu = {}, {}
            for keep in order:
                run_id = f"bench-{task}-{i}" if keep else None
                c0 = time.process_time()
                times[keep] = train(spec, settings=settings, run_id=run_id).wall_time
                cpu[keep] = time.process_time() - c0
                if run_id is not None:
                    taken.append(len(checkpoints.steps(settings.checkpoint_root, run_id)))
            with_s.append(times[True])
            without_s.append(times[False])
            ratios.append(times[True] / times[False])
            cpu_ratios.append(cpu[True] / cpu[False])
        out[task] = {
            "steps": spec.resolved().steps,
            "checkpoints": taken,
            "with_s": with_s,
            "without_s": without_s,
            "overhead": statistics.median(ratios) - 1,
            "cpu_overhead": statistics.median(cpu_ratios) - 1,
        }
    return out


def checkpoint_bytes(settings: Settings, tasks: list[str] | None = None) -> dict:
    """{task: {"params", "bytes", "bytes_per_run"}} for each task's default model whose data is here."""
    from workers.engine.checkpoint import LoopState, capture, serialize
    from workers.engine.loop_setup import build_model, make_optimizer, seed_everything
    from workers.engine.tasks import load_task
    from workers.engine.tasks.base import seeded

    out = {}
    for name in tasks or list(TASKS):
        if not task_availability(name, settings.data_dir).available:
            continue
        spec = RunSpec(task=name, device="cpu").resolved()
        data = load_task(spec, settings)
        seed_everything(spec.seed)
        model = build_model(spec, data)
        optimizer = make_optimizer(spec, model)
        batches = data.train_batches(min(spec.batch_size, 8), seeded(spec.seed, 4))
        x, y = next(batches)
        data.loss(model(x), y).backward()
        optimizer.step()
        parts = serialize(capture(spec, model, optimizer, batches, None, LoopState(1)))
        size = sum(memoryview(part).nbytes for part in parts)
        params = sum(p.numel() for p in model.parameters())
        out[name] = {"params": params, "bytes": size, "bytes_per_run": size * PER_RUN}
    return out


def fork_first_point(repeats: int) -> dict:
    """Fork → the child's first point, and a fresh run's submit → first point, on one warm server."""
    from benchmarks.demo import Watch, _cancel, first_point
    from benchmarks.service import running_lab

    with tempfile.TemporaryDirectory(prefix="normlab-bench-fork-") as tmp:
        with running_lab(Path(tmp), workers=1, timeout=180) as lab:
            url = lab.url
            first_point(url)  # warm the worker
            parent = httpx.post(url + "api/runs", json={**RUN, "steps": 60}, timeout=30).json()["id"]
            watch = Watch(url, parent)
            watch.wait_end(timeout=300)
            forks, fresh = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                r = httpx.post(f"{url}api/runs/{parent}/fork", json={"step": 30, "changes": {}}, timeout=30)
                r.raise_for_status()
                child = r.json()["id"]
                w = Watch(url, child)
                forks.append(w.wait("scalars", timeout=120) - t0)
                _cancel(url, child, w)
                fresh.append(first_point(url))
    return {
        "fork_first_point_s": forks,
        "fork_first_point_median_s": statistics.median(forks),
        "fresh_first_point_median_s": statistics.median(fresh),
    }


def main(argv: list[str] | None, settings: Settings) -> int:
    p = argparse.ArgumentParser(prog="normlab bench fork", description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--pairs", type=int, default=3, help="paired runs with and without checkpoints per task")
    p.add_argument("--steps", type=int, default=None, help="steps per overhead run (default: the task's)")
    p.add_argument("--repeats", type=int, default=5, help="forks for the first-point median")
    p.add_argument("--no-server", action="store_true", help="skip the fork -> first point figure")
    p.add_argument("--tasks", default=None, help="comma-separated tasks to measure (default: all)")
    args = p.parse_args(argv)
    tasks = args.tasks.split(",") if args.tasks else None
    with tempfile.TemporaryDirectory(prefix="normlab-bench-ckpt-") as tmp:
        local = settings.model_copy(update={"checkpoint_dir": Path(tmp)})
        results: dict = {
            "overhead": checkpoint_overhead(local, args.pairs, args.steps, tasks),
            "bytes": checkpoint_bytes(local, tasks),
        }
    if not args.no_server:
        results["fork"] = fork_first_point(args.repeats)
    results["targets"] = TARGETS
    if args.json:
        print(json.dumps(results))  # one line: `normlab bench fork --save` reads it
        return 0
    print(
        f"{'checkpoint overhead':<24}{'steps':>7}{'kept':>7}{'with (s)':>10}{'without (s)':>12}"
        f"{'ratio':>8}{'CPU ratio':>11}"
    )
    for task, r in results["overhead"].items():
        w, wo = statistics.median(r["with_s"]), statistics.median(r["without_s"])
        kept = f"{min(r['checkpoints'])}-{max(r['checkpoints'])}"
        print(
            f"{task:<24}{r['steps']:>7}{kept:>7}{w:>10.3f}{wo:>12.3f}"
            f"{1 + r['overhead']:>7.3f}×{1 + r['cpu_overhead']:>10.3f}×"
            f"  (target ≤ {1 + TARGETS['checkpoint_overhead']:.2f}×)"
        )
    print(f"\n{'checkpoint bytes':<24}{'params':>10}{'one':>12}{'per run':>12}")
    for task, r in results["bytes"].items():
        print(f"{task:<24}{r['params']:>10,}{r['bytes']:>12,}{r['bytes_per_run']:>12,}")
    if "fork" in results:
        f = results["fork"]
        print(
            f"\nfork → child's first point, median: {f['fork_first_point_median_s']:.3f} s (target ≤ 1 s); "
            f"a fresh run's submit → first point: {f['fresh_first_point_median_s']:.3f} s; "
            f"ratio {f['fork_first_point_median_s'] / f['fresh_first_point_median_s']:.2f}×"
        )
    return 0


def tables(result: dict) -> list[dict]:
    """BENCHMARKS.md's tables of a saved result (benchmarks.report)."""
    target = f"≤ {TARGETS['checkpoint_overhead']:.0%}"
    overhead = {
        "caption": "Checkpoint overhead at the default cadence: median of the paired ratios (with ÷ without) "
        "of the run's wall time and of the process's CPU time (the writer thread's included).",
        "columns": ["task", "steps", "checkpoints kept", "without (s)", "wall", "CPU", "target"],
        "rows": [
            [
                task,
                r["steps"],
                f"{min(r['checkpoints'])}–{max(r['checkpoints'])}",
                f"{statistics.median(r['without_s']):.3f}",
                f"{r['overhead']:+.1%}",
                f"{r['cpu_overhead']:+.1%}",
                target,
            ]
            for task, r in result["overhead"].items()
        ],
    }
    size = {
        "caption": "One checkpoint of each task's default model after a step (Adam's moments present), "
        "and at "
        f"most {PER_RUN} a run.",
        "columns": ["task's default model", "parameters", "one checkpoint (bytes)", f"{PER_RUN} (bytes)"],
        "rows": [
            [task, f"{r['params']:,}", f"{r['bytes']:,}", f"{r['bytes_per_run']:,}"]
            for task, r in result["bytes"].items()
        ],
    }
    out = [overhead, size]
    if "fork" in result:
        f = result["fork"]
        out.append(
            {
                "caption": "On a warm `normlab up` (one worker), median of the repeats.",
                "columns": ["figure", "seconds", "target"],
                "rows": [
                    [
                        "fork → child's first point",
                        f"{f['fork_first_point_median_s']:.2f} "
                        f"({min(f['fork_first_point_s']):.2f}–{max(f['fork_first_point_s']):.2f})",
                        f"≤ {TARGETS['fork_first_point_median_s']:g}",
                    ],
                    ["a fresh run: submit → first point", f"{f['fresh_first_point_median_s']:.2f}", ""],
                ],
            }
        )
    return out
