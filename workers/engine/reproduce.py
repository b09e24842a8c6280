"""`reproduce(preset) -> dict`: a preset's runs over seeds, aggregated per run, the paper's direction judged.

Each run label gets its final validation metric per seed (mean, sample std, the per-seed values), the
mean validation curve, the metric at ¼, ½ and the end of training, and the curve's area ÷ its step span
(its mean height: lower means a loss fell sooner). The paper's direction for a preset is a list of claims
(`RULES`), each judged on the means and, paired by seed (one seed = the same data splits for every
run), on every seed:

    better A B     A's mean beats B's (lower for losses / bpc / mse, higher for accuracy)
    close A B      |mean A − mean B| ≤ max(CLOSE_REL × the larger mean, 2 × the standard error of the
                   difference): "about equal" within run-to-run noise or a quarter of the value
    gap A1 A2 B1 B2   |A1 − A2| < |B1 − B2|: A is less sensitive to the change than B
    steadier A B   A's hidden-state norm varies less over the time steps than B's: the spread
                   max_t ‖h_t‖ ÷ min_t ‖h_t‖ of the run's last hidden-state trace (§3.1; needs probes)
    best A         A beats every other run
    trains A       A's validation loss ends below ln(classes), the loss of a uniform guess
    refused N      the spec refuses norm N at the preset's batch size (checked, not trained)

A claim "holds" on the means; "all_seeds" says whether it also held on every seed by itself.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch
from pydantic import ValidationError

from normlab.presets import PRESETS, Preset
from normlab.settings import Settings, get_settings
from normlab.spec import RunSpec

CLOSE_REL = 0.25
FRACTIONS = (0.25, 0.5, 1.0)
HIGHER_IS_BETTER = {"accuracy"}
CURVE_FIELD = {"val_loss": "val_loss", "accuracy": "accuracy", "bpc": "bpc", "mse": "val_loss"}

RULES: dict[str, list[tuple]] = {
    "fig6-batch128": [("close", "layer", "batch")],
    "fig6-batch4": [("better", "layer", "batch")],
    "online": [("trains", "layer"), ("refused", "batch"), ("better", "layer", "none")],
    "convnets": [("better", "batch", "layer"), ("better", "layer", "none")],
    "gain-init": [("gap", "layer g=1.0", "layer g=0.1", "batch g=1.0", "batch g=0.1")],
    "long-sequences": [("best", "layer"), ("steadier", "layer", "none")],
}


def metric_key(metric: str) -> str:
    """The RunResult.metrics key of a preset's metric: 'val_loss' stays, 'accuracy' -> 'val_accuracy'."""
    return metric if metric.startswith(("val_", "test_")) else f"val_{metric}"


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def curve_summary(curves: list[list[tuple[int, float]]], steps: int) -> dict:
    """Mean validation curve over seeds, the metric near ¼, ½, 1 of training, and area ÷ step span."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            if value is not None and math.isfinite(value):
                by_step.setdefault(step, []).append(value)
    xs = sorted(by_step)
    ys = [statistics.fmean(by_step[s]) for s in xs]
    at = []  # the last evaluation at or before each fraction of training (None when there was none yet)
    for frac in FRACTIONS:
        before = [i for i, s in enumerate(xs) if s <= max(1, round(frac * steps))]
        at.append({"fraction": frac, "step": xs[before[-1]] if before else None,
                   "value": ys[before[-1]] if before else None})
    if len(xs) > 1:
        area = sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(len(xs) - 1))
        auc = area / (xs[-1] - xs[0])
    else:
        auc = ys[0] if ys else None
    return {"steps": xs, "mean": ys, "at": at, "auc": auc}


def hidden_spread(probes: dict | None) -> float | None:
    """max_t ‖h_t‖ ÷ min_t ‖h_t‖ over the time steps of a run's last hidden-state trace (1 = flat), or None
    without a per-time-step trace."""
    norms = ((probes or {}).get("hidden") or {}).get("hidden_norms")
    if not norms or any(v is None or not math.isfinite(v) for v in norms) or min(norms) <= 0:
        return None
    return max(norms) / min(norms)


def aggregate(label: str, spec: RunSpec, records: list[dict], metric: str) -> dict:
    """One run label's outcome from its per-seed records {"seed", "status", "value", "curve", "wall_time"[,
    "hidden_spread"]}."""
    values = [r["value"] for r in records]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    mean, std = _mean_std(finite)
    spreads = [r.get("hidden_spread") for r in records]
    spread_mean, spread_std = _mean_std([s for s in spreads if s is not None])
    return {
        "label": label, "spec": spec.model_dump(exclude={"seed", "probes"}),
        "seeds": [r["seed"] for r in records], "values": values, "mean": mean, "std": std,
        "n_ok": len(finite), "statuses": [r["status"] for r in records],
        "messages": [r.get("message") for r in records if r["status"] != "completed"],
        "wall_time": sum(r["wall_time"] for r in records),
        "curve": curve_summary([r["curve"] for r in records], spec.steps or 1),
        "hidden_spread": ({"values": spreads, "mean": spread_mean, "std": spread_std}
                          if spread_mean is not None else None),
    }


def _beats(a: float | None, b: float | None, higher: bool) -> bool:
    if a is None:
        return False
    if b is None:
        return True  # b diverged or failed on that seed
    return a > b if higher else a < b


def _paired(runs: dict, *labels: str) -> list[tuple]:
    """Per-seed tuples of the labels' values (seeds shared by all of them)."""
    maps = [dict(zip(runs[lab]["seeds"], runs[lab]["values"], strict=True)) for lab in labels]
    seeds = [s for s in maps[0] if all(s in m for m in maps)]
    return [tuple(m[s] for m in maps) for s in seeds]


def judge(rule: tuple, runs: dict, metric: str, preset: Preset, chance: float | None) -> dict:
    """One claim of a preset's rule: {"claim", "holds", "all_seeds", …numbers}."""
    higher = metric.removeprefix("val_") in HIGHER_IS_BETTER
    kind, *labels = rule
    mean = {lab: runs[lab]["mean"] for lab in labels if lab in runs}
    if kind == "better":
        a, b = labels
        pairs = _paired(runs, a, b)
        return {"claim": f"{a} better than {b}", "holds": _beats(mean[a], mean[b], higher),
                "all_seeds": all(_beats(x, y, higher) for x, y in pairs),
                "difference": _diff(mean[a], mean[b])}
    if kind == "close":
        a, b = labels
        pairs = [(x, y) for x, y in _paired(runs, a, b) if x is not None and y is not None]
        diffs = [x - y for x, y in pairs]
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
        if mean[a] is None or mean[b] is None:
            return {"claim": f"{a} ≈ {b}", "holds": False, "all_seeds": False}
        tol = max(CLOSE_REL * max(abs(mean[a]), abs(mean[b])), 2 * se)
        return {"claim": f"{a} ≈ {b}", "holds": abs(mean[a] - mean[b]) <= tol,
                "all_seeds": all(abs(d) <= CLOSE_REL * max(abs(x), abs(y)) for d, (x, y) in zip(diffs, pairs,
                                                                                                  strict=True)),
                "difference": mean[a] - mean[b], "tolerance": tol}
    if kind == "gap":
        a1, a2, b1, b2 = labels
        gaps = [(abs(w - x), abs(y - z)) for w, x, y, z in _paired(runs, a1, a2, b1, b2)
                if None not in (w, x, y, z)]
        ga, gb = _diff(mean[a1], mean[a2]), _diff(mean[b1], mean[b2])
        return {"claim": f"|{a1} − {a2}| smaller than |{b1} − {b2}|",
                "holds": ga is not None and gb is not None and abs(ga) < abs(gb),
                "all_seeds": bool(gaps) and all(x < y for x, y in gaps),
                "gap_a": None if ga is None else abs(ga), "gap_b": None if gb is None else abs(gb)}
    if kind == "steadier":
        a, b = labels
        spread = {lab: runs[lab].get("hidden_spread") for lab in (a, b)}
        if spread[a] is None or spread[b] is None:
            return {"claim": f"{a} steadier than {b}", "holds": False, "all_seeds": False,
                    "message": "no hidden-state trace (the preset's runs need probes on)"}
        by_seed = [dict(zip(runs[lab]["seeds"], spread[lab]["values"], strict=True)) for lab in (a, b)]
        pairs = [(by_seed[0][s], by_seed[1][s]) for s in by_seed[0] if s in by_seed[1]]  # paired by seed
        return {"claim": f"{a} steadier than {b} (‖h_t‖ max ÷ min over time steps)",
                "holds": spread[a]["mean"] < spread[b]["mean"],
                "all_seeds": bool(pairs) and all(x is not None and y is not None and x < y for x, y in pairs),
                "spread_a": spread[a]["mean"], "spread_b": spread[b]["mean"]}
    if kind == "best":
        (a,) = labels
        others = [lab for lab in runs if lab != a]
        per_seed = [all(_beats(v[0], o, higher) for o in v[1:]) for v in _paired(runs, a, *others)]
        return {"claim": f"{a} best of {', '.join(runs)}", "all_seeds": bool(per_seed) and all(per_seed),
                "holds": all(_beats(runs[a]["mean"], runs[o]["mean"], higher) for o in others),
                "differences": {o: _diff(runs[a]["mean"], runs[o]["mean"]) for o in others}}
    if kind == "trains":
        (a,) = labels
        vals = runs[a]["values"]
        ok = chance is not None and bool(vals) and all(v is not None and v < chance for v in vals)
        return {"claim": f"{a} trains (val loss below ln(classes) = {chance:.3f})" if chance else
                f"{a} trains", "holds": mean[a] is not None and chance is not None and mean[a] < chance,
                "all_seeds": ok, "chance": chance}
    if kind == "refused":
        (norm,) = labels
        message = refusal(preset.runs[0], norm)
        return {"claim": f"norm '{norm}' refused at batch size {preset.runs[0].batch_size}",
                "holds": message is not None, "all_seeds": message is not None, "message": message}
    raise ValueError(f"unknown claim kind {kind!r}")


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def refusal(spec: RunSpec, norm: str) -> str | None:
    """The spec's message when `spec` with `norm` is refused, else None."""
    try:
        RunSpec(**{**spec.model_dump(exclude={"probes"}), "norm": norm})
    except ValidationError as exc:
        return " ".join(e["msg"] for e in exc.errors())
    return None


def _chance(preset: Preset, settings: Settings) -> float | None:
    """ln(classes) for a classification preset (the loss of a uniform guess), else None."""
    from workers.engine.tasks import load_task

    data = load_task(preset.runs[0].resolved(), settings)
    return math.log(data.n_outputs) if data.info.target != "regression" and data.n_outputs > 1 else None


def run_one(spec: RunSpec, metric: str, settings: Settings) -> dict:
    """Train one spec; its status, final metric value, validation curve [(step, value)] and wall time."""
    from workers.engine import train

    field = CURVE_FIELD.get(metric.removeprefix("val_"), "val_loss")
    curve: list[tuple[int, float]] = []

    def emit(event) -> None:
        if event.kind == "scalars" and event.payload.get(field) is not None:
            curve.append((event.step, event.payload[field]))

    result = train(spec, emit, settings=settings)
    value = result.metrics.get(metric_key(metric))
    return {"seed": spec.seed, "status": result.status, "value": value, "curve": curve,
            "wall_time": result.wall_time, "message": result.error,
            "hidden_spread": hidden_spread(result.probes)}


def reproduce(preset: Preset | str, seeds: list[int] | None = None, steps: int | None = None,
              settings: Settings | None = None, threads: int | None = 1,
              progress: Callable[[str, int, dict], None] | None = None) -> dict:
    """Run every (run, seed) of a preset and return the side-by-side comparison as JSON-ready data.

    `steps` overrides every run's steps (evaluation every eval_every steps and at the last step);
    `threads` sets torch's intra-op threads for the runs (1 by default: these models are small, and on a
    shared machine one thread per process is both faster and more repeatable); `progress(label, seed,
    record)` is called after each run.
    """
    preset = PRESETS[preset] if isinstance(preset, str) else preset
    settings = settings or get_settings()
    seeds = list(preset.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    runs: dict[str, dict] = {}
    try:
        for label, base in zip(preset.run_labels(), preset.runs, strict=True):
            spec = base if steps is None else base.model_copy(update={"steps": steps})
            records = []
            for seed in seeds:
                record = run_one(spec.model_copy(update={"seed": seed}), preset.metric, settings)
                records.append(record)
                if progress is not None:
                    progress(label, seed, record)
            runs[label] = aggregate(label, spec.resolved(), records, preset.metric)
    finally:
        torch.set_num_threads(old_threads)
    # claims about runs this preset (or a trimmed copy of it) does not have are left out
    rules = [r for r in RULES.get(preset.name, []) if r[0] == "refused" or set(r[1:]) <= set(runs)]
    chance = _chance(preset, settings) if any(r[0] == "trains" for r in rules) else None
    claims = [judge(rule, runs, preset.metric, preset, chance) for rule in rules]
    return {
        "preset": preset.name, "title": preset.title, "paper_ref": preset.paper_ref, "expect": preset.expect,
        "metric": preset.metric, "higher_is_better": preset.metric.removeprefix("val_") in HIGHER_IS_BETTER,
        "seeds": seeds, "steps": steps, "threads": torch.get_num_threads() if not threads else threads,
        "runs": list(runs.values()),
        "direction": {"claims": claims, "holds": bool(claims) and all(c["holds"] for c in claims),
                      "all_seeds": bool(claims) and all(c["all_seeds"] for c in claims),
                      "rule": None if rules else "no rule for this preset: compare the numbers"},
        "wall_time": time.perf_counter() - start,
    }
