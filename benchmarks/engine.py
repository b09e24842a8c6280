"""`normlab bench engine [--json]`: the engine's training steps/s per task and normalizer, and the LN-LSTM
time ratio to `torch.nn.LSTM`.

Steps/s: every available task's default model (normlab_client.catalog defaults: hidden size, layers, cell,
sequence length, batch size) with each of its normalizers, trained through `workers.engine.train` for
warm-up + measured steps. The time of a step is the loop's own (forward, backward, optimizer step; the
per-step `steps_per_s` of its scalars events), so data loading and evaluation are left out, and the
warm-up steps are dropped. The LN-LSTM ratio comes from `benchmarks.lstm_vs_torch.measure_lnlstm_ratio`
(fwd+bwd, B=32, T=64, H=256 by default), its contenders interleaved in one process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from normlab.settings import Settings
from normlab_client.catalog import TASKS, task_availability
from normlab_client.spec import RunSpec

WARMUP_STEPS, MEASURED_STEPS = 3, 20


def measure_steps_per_s(spec: RunSpec, warmup: int, steps: int, settings: Settings) -> dict:
    """{"steps_per_s", "ms_per_step", "status"} of `spec` trained for warmup + steps steps; both figures
    come from the median timed step."""
    from workers.engine import train

    step_times: dict[int, float] = {}

    def emit(event) -> None:
        # log_every is 1 for runs of ≤ 400 steps, so each scalars event times exactly one step
        if event.kind == "scalars" and event.payload.get("steps_per_s"):
            step_times[event.step] = 1.0 / event.payload["steps_per_s"]

    run_spec = spec.model_copy(update={"steps": warmup + steps, "eval_every": 100_000})
    result = train(run_spec, emit, settings=settings)
    measured = [t for s, t in step_times.items() if s > warmup]
    if result.status != "completed" or not measured:
        return {"status": result.status, "steps_per_s": None, "ms_per_step": None, "error": result.error}
    median = statistics.median(measured)  # the median step: robust to other processes' bursts
    return {"status": result.status, "steps_per_s": 1.0 / median, "ms_per_step": 1e3 * median, "error": None}


def task_rows(
    tasks: list[str], norms: list[str] | None, warmup: int, steps: int, settings: Settings, rounds: int = 1
) -> list[dict]:
    """One row per (task, normalizer): the default model's configuration and its steps/s.

    With several rounds every configuration is measured once per round, round-robin, and the fastest
    round is kept (`rounds_ms` lists them all): a burst of another process's work then spoils one
    round of a configuration, not its figure."""
    rows, specs = [], []
    for name in tasks:
        info = TASKS[name]
        avail = task_availability(name, settings.data_dir)
        for norm in info.norms:
            if norms is not None and norm not in norms:
                continue
            row = {"task": name, "norm": norm}
            if not avail.available:
                rows.append(
                    {
                        **row,
                        "status": "unavailable",
                        "steps_per_s": None,
                        "ms_per_step": None,
                        "error": avail.reason,
                    }
                )
                continue
            spec = RunSpec(task=name, norm=norm, batch_size=info.batch_size).resolved()
            row.update(model=_describe(spec, info.kind), batch_size=spec.batch_size, rounds_ms=[])
            rows.append(row)
            specs.append((row, spec))
    for _ in range(rounds):
        for row, spec in specs:
            m = measure_steps_per_s(spec, warmup, steps, settings)
            row["rounds_ms"].append(m["ms_per_step"])
            best = row.get("ms_per_step")
            if m["ms_per_step"] is None:
                row.setdefault("status", m["status"])
                row.setdefault("error", m["error"])
            elif best is None or m["ms_per_step"] < best:
                row.update(m)
    for row, _ in specs:
        row.setdefault("ms_per_step", None)
        row.setdefault("steps_per_s", None)
    return rows


def _describe(spec: RunSpec, kind: str) -> str:
    if kind == "sequence":
        return f"{spec.cell} {spec.layers}x{spec.hidden_size}, T={spec.seq_len}"
    if kind == "image":
        return f"ConvNet {spec.layers} conv layers, {spec.hidden_size} channels"
    return f"MLP {spec.layers}x{spec.hidden_size}"


def _list(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


def main(argv: list[str] | None, settings: Settings) -> int:
    p = argparse.ArgumentParser(prog="normlab bench engine", description=__doc__.split("\n")[0])
    p.add_argument("--tasks", help="comma-separated tasks (default: all in the catalog)")
    p.add_argument("--norms", help="comma-separated normalizers (default: each task's own)")
    p.add_argument("--warmup", type=int, default=WARMUP_STEPS, help="warm-up steps, not timed")
    p.add_argument("--steps", type=int, default=MEASURED_STEPS, help="timed steps per configuration")
    p.add_argument("--rounds", type=int, default=2, help="round-robin rounds; the fastest is kept")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--lstm-batch", type=int, default=32)
    p.add_argument("--lstm-seq-len", type=int, default=64)
    p.add_argument("--lstm-hidden", type=int, default=256)
    p.add_argument("--lstm-repeats", type=int, default=7)
    p.add_argument("--no-lstm", action="store_true", help="skip the LN-LSTM vs torch.nn.LSTM ratio")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    tasks = _list(args.tasks) or list(TASKS)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    if min(args.steps, args.rounds) < 1 or args.warmup < 0 or (args.threads is not None and args.threads < 1):
        p.error("--steps, --rounds and --threads must be ≥ 1, --warmup ≥ 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows = task_rows(tasks, _list(args.norms), args.warmup, args.steps, settings, args.rounds)
    lstm = None
    if not args.no_lstm:
        from benchmarks.lstm_vs_torch import measure_lnlstm_ratio
        from workers.engine.options import EngineOptions

        lstm = measure_lnlstm_ratio(
            batch=args.lstm_batch,
            seq_len=args.lstm_seq_len,
            hidden=args.lstm_hidden,
            repeats=args.lstm_repeats,
            options=EngineOptions.from_settings(settings),
        )
    out = {
        "threads": torch.get_num_threads(),
        "warmup_steps": args.warmup,
        "measured_steps": args.steps,
        "rounds": args.rounds,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "steps_per_s": rows,
        "lnlstm_vs_torch_lstm": lstm,
        "wall_time": time.perf_counter() - start,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)
    return 0


def print_table(out: dict) -> None:
    print(
        f"Engine steps/s ({out['device']}, {out['threads']} threads; median of {out['measured_steps']} "
        f"timed steps after {out['warmup_steps']} warm-up, evaluation excluded; best of {out['rounds']} "
        "rounds):"
    )
    print(f"  {'task':<12} {'norm':<7} {'model':<34} {'batch':>5} {'steps/s':>9} {'ms/step':>8}")
    for r in out["steps_per_s"]:
        if r["steps_per_s"] is None:
            print(f"  {r['task']:<12} {r['norm']:<7} {r['status']}: {r['error']}")
            continue
        print(
            f"  {r['task']:<12} {r['norm']:<7} {r['model']:<34} {r['batch_size']:>5} "
            f"{r['steps_per_s']:>9.1f} {r['ms_per_step']:>8.1f}"
        )
    lstm = out["lnlstm_vs_torch_lstm"]
    if lstm:
        print(
            f"LN-LSTM vs torch.nn.LSTM, fwd+bwd, B={lstm['batch']} T={lstm['seq_len']} H={lstm['hidden']} "
            f"(median of {lstm['repeats']}): engine {lstm['engine_s'] * 1e3:.1f} ms, torch.nn.LSTM "
            f"{lstm['torch_lstm_s'] * 1e3:.1f} ms, ratio {lstm['ratio_engine_vs_torch']:.2f}x"
        )
