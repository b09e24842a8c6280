"""`normlab bench probes [--json] [--tasks a,b] [--norm layer] [--steps N] [--repeat R] [--min-seconds S]`.

Per task, its default spec (one evaluation, at the end), side by side in this process after a warm-up:

- default-length runs with probes off and with the default probes on, in pairs (off-on, on-off, off-on, …:
  `--repeat` pairs at least, more for a short task until its probes-off runs took `--min-seconds` of CPU):
  `overhead_paired`, the median over pairs of on ÷ off − 1 (both runs of a pair see the same host, and the
  alternating order cancels a drift within pairs; the figure to read), and the overhead (median on ÷
  median off − 1 of the runs' process CPU time, which a busy shared host disturbs far less than wall
  time; the wall-time ratio too; and `overhead_min`, fastest
  on ÷ fastest off − 1: another tenant only ever adds time, and on a VM whose speed drifts by 1.5× within
  minutes the medians of a few runs moved by ±10 points where the fastest runs stayed put), the number of
  Fisher estimates (median and fewest over the repeats) and the step of the first one;
- the cost of one Fisher estimate (per-layer trace + λ_max(F), and the weight sets' measured update
  over the next optimizer step: what a default run computes per estimate) in plain training steps, beside
  the cost the run's plan counts for it (`workers.probes.plan`, whose constants it checks): the
  task's default model trains a few steps, then estimates alternate with timed plain steps; each
  estimate's process CPU time over the median of the plain steps right after it (so a
  change in the host's load between them cancels). Warm: the median over one probe's estimates after its
  first; cold: the median over first estimates of fresh probes on the same model, interleaved with the
  warm ones (one cold estimate alone swung by ±20 % between runs). Run it with OMP_NUM_THREADS=1: then
  CPU time is the single thread's work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time

import torch

from normlab.settings import Settings
from normlab_client.catalog import TASKS, task_availability
from normlab_client.spec import ProbeSpec, RunSpec

WARM_STEPS = 10  # plain steps before the first estimate
ESTIMATES = 8  # warm estimates timed, each followed by PLAIN_BETWEEN timed plain steps
# cold estimates: the warm probe's first, then a fresh probe's first before every other warm one (5 in all)
PLAIN_BETWEEN = 5
MAX_PAIRS = 25  # off/on pairs at most for a short task (see --min-seconds)


def _loop_seconds(events) -> float:
    """Seconds of the training loop: the last scalars event's `elapsed` (the run's evaluations included)."""
    return max(e.payload["elapsed"] for e in events if e.kind == "scalars")


def _train(spec: RunSpec, settings: Settings):
    from workers.engine import train

    events: list = []
    cpu = time.process_time()
    result = train(spec, events.append, settings=settings)
    cpu = time.process_time() - cpu  # CPU seconds: less sensitive than wall time to a busy host
    if result.status != "completed":
        raise RuntimeError(f"{spec.task}: run ended {result.status}: {result.error}")
    return result, events, cpu


def estimate_costs(task: str, norm: str, settings: Settings) -> tuple[list[float], list[float]]:
    """(cold, warm) Fisher estimates' CPU time (trace + λ_max(F) + the sets' update) ÷ the median plain
    step's."""
    from workers.engine.loop_setup import build_model, make_optimizer, seed_everything
    from workers.engine.options import EngineOptions
    from workers.engine.tasks import load_task
    from workers.engine.tasks.base import seeded
    from workers.probes.curvature import CurvatureProbe
    from workers.probes.likelihood import Likelihood
    from workers.probes.weight_sets import add_update, snapshot

    spec = RunSpec(task=task, norm=norm).resolved()
    data = load_task(spec, settings)
    seed_everything(0)
    model = build_model(spec, data, EngineOptions.from_settings(settings))
    optimizer = make_optimizer(spec, model)
    batches = data.train_batches(spec.batch_size, seeded(0, 4))

    def probe() -> CurvatureProbe:
        return CurvatureProbe(
            model, Likelihood(data.info.target), data.loss, power_iterations=spec.probes.power_iterations
        )

    plain: list[float] = []
    x = y = None

    def step() -> None:
        nonlocal x, y
        x, y = next(batches)
        t0 = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        data.loss(model(x), y).backward()
        optimizer.step()
        plain.append(time.process_time() - t0)

    def timed(p: CurvatureProbe) -> float:
        # as in a run: the step's own forward, recorded for the estimate (its graph kept through the
        # backward), the estimate after the backward, then the optimizer's update, whose angle and size
        # per weight set the payload reports. The training step itself is not the estimate's cost, but what
        # the recording adds to it is: its time beyond the median plain step is counted
        bx, by = next(batches)
        t0 = time.process_time()
        recorded = p.recording(bx)
        optimizer.zero_grad(set_to_none=True)
        with recorded or contextlib.nullcontext():
            out = model(bx)
        data.loss(out, by).backward(retain_graph=recorded is not None)
        t1 = time.process_time()
        payload, _ = p.estimate(bx, by, spec.lr, recorded, out if recorded is not None else None)
        params = p.named
        before = snapshot(p.weight_sets, params)
        t2 = time.process_time()
        del recorded, out
        optimizer.step()
        t3 = time.process_time()
        for entry, weight_set in zip(payload["weight_sets"], p.weight_sets, strict=True):
            add_update(entry, weight_set, before[weight_set.param], params[weight_set.param], spec.optimizer)
        seconds = (t2 - t1) + (time.process_time() - t3)
        step_seconds = (t1 - t0) + (t3 - t2)
        for _ in range(PLAIN_BETWEEN):
            step()
        base = statistics.median(plain[-PLAIN_BETWEEN:])
        return (seconds + max(step_seconds - base, 0.0)) / base

    for _ in range(WARM_STEPS):
        step()
    warm_probe = probe()
    cold = [timed(warm_probe)]  # its first estimate is cold too
    warm = []
    for i in range(ESTIMATES):
        if i % 2 == 1:  # rounds 1, 3, 5, 7: a fresh probe's cold estimate, then the warm one
            cold.append(timed(probe()))
        warm.append(timed(warm_probe))
    return cold, warm


def _fisher(events) -> list:
    return [e for e in events if e.kind == "fisher"]


def bench_task(
    task: str, norm: str, steps: int | None, repeat: int, settings: Settings, min_seconds: float = 0.0
) -> dict:
    """One task's overhead with the default probes and its cost per Fisher estimate, cold and warm:
    `repeat` off/on pairs at least, more (up to MAX_PAIRS) until the probes-off runs took `min_seconds`
    of CPU in all."""
    info = TASKS[task]
    steps = steps or info.steps
    base = dict(task=task, norm=norm, steps=steps, eval_every=steps, seed=0)
    warm_up = RunSpec(**{**base, "steps": 3, "eval_every": 3}, probes=ProbeSpec(enabled=True))
    _train(warm_up, settings)
    off, on, off_cpu, on_cpu, runs, counts = [], [], [], [], [], []

    def run_off() -> None:
        _, ev, cpu = _train(RunSpec(**base), settings)
        off.append(_loop_seconds(ev))
        off_cpu.append(cpu)

    def run_on() -> None:
        result, ev, cpu = _train(RunSpec(**base, probes=ProbeSpec(enabled=True)), settings)
        on.append(_loop_seconds(ev))
        on_cpu.append(cpu)
        runs.append((result, ev))
        counts.append(len(_fisher(ev)))

    pairs = 0
    while pairs < repeat or (sum(off_cpu) < min_seconds and pairs < MAX_PAIRS):
        # ABBA: off-on, then on-off, so a drift of the host's speed within a pair cancels over two pairs
        for run in (run_off, run_on) if pairs % 2 == 0 else (run_on, run_off):
            run()
        pairs += 1
    paired = [a / b - 1 for a, b in zip(on_cpu, off_cpu, strict=True)]
    result, ev = runs[-1]
    plan = result.probes["plan"]
    fisher = _fisher(ev)
    warnings = [e.payload["message"] for e in ev if e.kind == "log" and e.payload.get("level") == "warning"]
    cold, warm = estimate_costs(task, norm, settings)
    on_s, off_s = statistics.median(on), statistics.median(off)
    return {
        "task": task,
        "norm": norm,
        "steps": steps,
        "off_s": off_s,
        "on_s": on_s,
        "overhead_wall": on_s / off_s - 1,
        "overhead": statistics.median(on_cpu) / statistics.median(off_cpu) - 1,
        "overhead_min": min(on_cpu) / min(off_cpu) - 1,
        "overhead_paired": statistics.median(paired),
        "overhead_paired_all": paired,
        "pairs": pairs,
        "off_cpu_s": statistics.median(off_cpu),
        "on_cpu_s": statistics.median(on_cpu),
        "off_cpu_all": off_cpu,
        "on_cpu_all": on_cpu,
        "prober_share": result.probes["overhead"],
        "planned_share": plan["planned_share"],
        "fisher_estimates": int(statistics.median_low(counts)),
        "planned_estimates": plan["fisher_count"],
        "fisher_estimates_min": min(counts),
        "fisher_estimates_all": counts,
        "first_fisher_step": fisher[0].step if fisher else None,
        "first_fisher_fraction": fisher[0].step / steps if fisher else None,
        "run_cost_steps": [e.payload["cost_steps"] for e in fisher],
        "cold_cost_steps": statistics.median(cold),
        "warm_cost_steps": statistics.median(warm),
        "cold_over_warm": statistics.median(cold) / statistics.median(warm),
        "planned_cold_steps": plan["cold_cost_steps"],
        "planned_warm_steps": plan["warm_cost_steps"],
        "cold_costs": cold,
        "warm_costs": warm,
        "warnings": warnings,
    }


def _probed(task: str) -> bool:
    """Whether the probes model the task's predictive distribution (a mixture density they do not)."""
    from workers.probes.likelihood import Likelihood

    return TASKS[task].target in Likelihood.TARGETS


def _accuracy(tasks: list[str], norm: str, as_json: bool, settings: Settings) -> int:
    from benchmarks.probes_accuracy import lambda_errors, summary

    rows = {}
    for t in tasks:
        rows[t] = summary(lambda_errors(t, norm, settings))
        print(json.dumps({t: rows[t]}), file=sys.stderr, flush=True)
    if as_json:
        print(json.dumps({"benchmark": "probes-accuracy", "norm": norm, "results": rows}, indent=2))
        return 0
    print(
        f"{'task':12} {'cold median':>11} {'cold max':>9} {'warm median':>11} {'warm max':>9}"
        "  (1 − λ/converged)"
    )
    for t, r in rows.items():
        cold, warm = r["cold"], r.get("warm", {})
        print(
            f"{t:12} {cold['median']:>11.3f} {cold['max']:>9.3f} "
            f"{_fmt(warm.get('median'), '.3f'):>11} {_fmt(warm.get('max'), '.3f'):>9}"
        )
    return 0


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None, settings: Settings) -> int:
    parser = argparse.ArgumentParser(prog="normlab bench probes", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--tasks", default=None, help="comma-separated tasks (default: all available that the probes model)"
    )
    parser.add_argument("--norm", default="layer")
    parser.add_argument("--steps", type=int, default=None, help="override every task's default steps")
    parser.add_argument("--repeat", type=int, default=3, help="off/on pairs per task (median taken)")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=10.0,
        help="more pairs for a short task until its probes-off runs took this much CPU in all "
        f"(at most {MAX_PAIRS} pairs): a 1 s run's overhead is lost in a drifting host's noise otherwise",
    )
    parser.add_argument(
        "--accuracy",
        action="store_true",
        help="instead: λ_max(F) cold and warm against a converged one (benchmarks/probes_accuracy.py)",
    )
    args = parser.parse_args(argv)
    data_dir = settings.data_dir
    tasks = (
        args.tasks.split(",")
        if args.tasks
        else [t for t in TASKS if task_availability(t, data_dir).available and _probed(t)]
    )
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    if args.accuracy:
        return _accuracy(tasks, args.norm, args.json, settings)
    started = time.perf_counter()
    rows = []
    for t in tasks:  # one line per task on stderr as it finishes, so a long run can be followed
        rows.append(bench_task(t, args.norm, args.steps, args.repeat, settings, args.min_seconds))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    out = {
        "benchmark": "probes",
        "budget": ProbeSpec().budget,
        "clock": "process CPU time",
        "repeat": args.repeat,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - started,
        "results": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"{'task':12} {'steps':>5} {'off cpu':>7} {'on cpu':>7} {'paired':>7} {'pairs':>5} {'overhead':>8} "
        f"{'fastest':>7} {'wall':>6} "
        f"{'estimates':>9} {'fewest':>6} {'first at':>9} {'cold':>6} {'warm':>6} {'cold/warm':>9} "
        f"{'plan cold':>9} {'plan warm':>9}   (cost per estimate in plain training steps)"
    )
    for r in rows:
        first = (
            "-"
            if r["first_fisher_step"] is None
            else f"{r['first_fisher_step']} ({r['first_fisher_fraction']:.0%})"
        )
        cold, warm = _fmt(r["cold_cost_steps"], ".1f"), _fmt(r["warm_cost_steps"], ".1f")
        print(
            f"{r['task']:12} {r['steps']:>5} {r['off_cpu_s']:>7.1f} {r['on_cpu_s']:>7.1f} "
            f"{r['overhead_paired']:>7.1%} {r['pairs']:>5} {r['overhead']:>8.1%} "
            f"{r['overhead_min']:>7.1%} {r['overhead_wall']:>6.0%} "
            f"{r['fisher_estimates']:>9} {r['fisher_estimates_min']:>6} {first:>9} "
            f"{cold:>6} {warm:>6} {_fmt(r['cold_over_warm'], '.2f'):>9} "
            f"{r['planned_cold_steps']:>9.1f} {r['planned_warm_steps']:>9.1f}"
        )
    return 0
