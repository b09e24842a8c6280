"""`normlab bench probes [--json] [--tasks a,b] [--norm layer] [--steps N] [--repeat R]`.

Per task (its default spec; one evaluation, at the end): training with probes off and on, side by side
in this process (a warm-up run first, then off/on pairs), the overhead ratio on ÷ off of the training
loop's time, the prober's own measure of its share, and each estimator's cost in plain training steps
from a third, short run with every estimator on (Hessian and empirical Fisher included; the first,
cold estimate excluded).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

from normlab.catalog import TASKS, task_availability
from normlab.settings import get_settings
from normlab.spec import ProbeSpec, RunSpec


def _loop_seconds(events) -> float:
    """Seconds of the training loop: the last scalars event's `elapsed` (the run's evaluations included)."""
    return max(e.payload["elapsed"] for e in events[:-1] if e.kind == "scalars")


def _train(spec: RunSpec):
    from workers.engine import train

    events: list = []
    cpu = time.process_time()
    result = train(spec, events.append)
    events.append(time.process_time() - cpu)  # CPU seconds of the whole run, last
    if result.status != "completed":
        raise RuntimeError(f"{spec.task}: run ended {result.status}: {result.error}")
    return result, events


def bench_task(task: str, norm: str, steps: int | None, repeat: int) -> dict:
    """One task's overhead ratio and estimator costs."""
    info = TASKS[task]
    steps = steps or info.steps
    base = dict(task=task, norm=norm, steps=steps, eval_every=steps, seed=0)
    _train(RunSpec(**{**base, "steps": 3, "eval_every": 3}, probes=ProbeSpec(enabled=True)))  # warm-up
    off, on, off_cpu, on_cpu, share, fisher_n, hidden_n = [], [], [], [], [], [], []
    for _ in range(repeat):
        _, ev = _train(RunSpec(**base))
        off.append(_loop_seconds(ev))
        off_cpu.append(ev[-1])
        result, ev = _train(RunSpec(**base, probes=ProbeSpec(enabled=True)))
        on.append(_loop_seconds(ev))
        on_cpu.append(ev[-1])
        share.append(result.probes["overhead"])
        fisher_n.append(sum(getattr(e, "kind", None) == "fisher" for e in ev))
        hidden_n.append(sum(getattr(e, "kind", None) == "hidden" for e in ev))
    cost_steps = min(steps, 60)
    _, ev = _train(RunSpec(**{**base, "steps": cost_steps, "eval_every": cost_steps},
                           probes=ProbeSpec(enabled=True, fisher_every=10, budget=5.0, hessian=True,
                                            empirical_fisher=True)))
    estimates = [e.payload for e in ev[:-1] if e.kind == "fisher"]
    warm = estimates[1:] or estimates
    costs = {}
    for key in sorted({k for p in warm for k in p.get("costs", {})}):
        values = [p["costs"][key] for p in warm if p["costs"].get(key) is not None]
        costs[key] = statistics.mean(values) if values else None
    on_s, off_s = statistics.median(on), statistics.median(off)
    return {"task": task, "norm": norm, "steps": steps, "off_s": off_s, "on_s": on_s,
            "overhead_ratio": on_s / off_s, "off_cpu_s": statistics.median(off_cpu),
            "on_cpu_s": statistics.median(on_cpu),
            "overhead_ratio_cpu": statistics.median(on_cpu) / statistics.median(off_cpu),
            "prober_share": statistics.median(share),
            "fisher_events": fisher_n[-1], "hidden_events": hidden_n[-1],
            "estimator_cost_steps": costs,
            "estimate_cost_steps": statistics.mean(p["cost_steps"] for p in warm if p["cost_steps"]),
            "cold_estimate_cost_steps": estimates[0]["cost_steps"] if estimates else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="normlab bench probes", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--tasks", default=None, help="comma-separated tasks (default: all available)")
    parser.add_argument("--norm", default="layer")
    parser.add_argument("--steps", type=int, default=None, help="override every task's default steps")
    parser.add_argument("--repeat", type=int, default=1, help="off/on pairs per task (median taken)")
    args = parser.parse_args(argv)
    data_dir = get_settings().data_dir
    tasks = args.tasks.split(",") if args.tasks else [
        t for t in TASKS if task_availability(t, data_dir).available]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    started = time.perf_counter()
    rows = []
    for t in tasks:  # one line per task on stderr as it finishes, so a long run can be followed
        rows.append(bench_task(t, args.norm, args.steps, args.repeat))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    out = {"benchmark": "probes", "budget": ProbeSpec().budget, "torch": torch.__version__,
           "machine": platform.machine(), "threads": torch.get_num_threads(),
           "seconds": time.perf_counter() - started, "results": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{'task':12} {'steps':>5} {'off s':>7} {'on s':>7} {'on/off':>7} {'cpu':>6} {'share':>6} "
          f"{'fisher':>6}  cost per estimate (steps): estimator costs")
    for r in rows:
        costs = ", ".join(f"{k} {v:.2f}" for k, v in r["estimator_cost_steps"].items() if v is not None)
        print(f"{r['task']:12} {r['steps']:>5} {r['off_s']:>7.2f} {r['on_s']:>7.2f} "
              f"{r['overhead_ratio']:>7.3f} {r['overhead_ratio_cpu']:>6.3f} {r['prober_share']:>6.3f} "
              f"{r['fisher_events']:>6}  {r['estimate_cost_steps']:.1f}: {costs}")
    return 0
