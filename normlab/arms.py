"""A preset's arms from its per-seed results: one arm per run label (or sweep combination) over its
seeds, with mean ± std of the final metric, the mean ± band validation curve and the hidden-state trace
figures. Torch-free: `normlab reproduce` (through the engine) and `GET /api/groups/{id}` (from the store)
build arms with the same functions; `normlab.claims` judges the claims on them.

A record (`SeedRecord`) is one (run, seed): its seed, status, final metric, validation curve
[(step, value)], wall time, message, and the run's last probe payloads or their `trace_stats`.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, NotRequired, TypedDict, TypeGuard

from normlab_client.events import fisher_weight_sets
from normlab_client.group_models import CellResult, Curve, CurvePoint, TraceName, TraceStat

START = 21  # the first time step counted in hidden-state spreads: steps 0–20 are start-up from h_0 = 0
FRACTIONS = (0.25, 0.5, 1.0)
SERIES_KEYS: tuple[TraceName, ...] = ("elr_orders", "angular_late", "eta_lambda_late", "eta_lambda_first")
TRACE_NAMES: tuple[TraceName, ...] = ("hidden_spread", "hidden_spread_late", "grad_orders", *SERIES_KEYS)


class SeedRecord(TypedDict):
    """One (run, seed) as `aggregate` reads it (plain data: it crosses process boundaries)."""

    seed: int
    status: NotRequired[str | None]
    value: NotRequired[float | None]  # the final metric (None, NaN or ±inf for a failed run)
    curve: NotRequired[list[tuple[int, float]]]
    wall_time: NotRequired[float | None]
    cpu_time: NotRequired[float]
    message: NotRequired[str | None]
    probes: NotRequired[dict[str, Any] | None]  # the run's last probe payloads (JSON)
    traces: NotRequired[dict[str, float | None]]  # trace_stats of them


def is_number(v: Any) -> TypeGuard[float]:
    """Whether `v` is a finite int or float (a failed or diverged run's value is None, NaN or ±inf)."""
    return isinstance(v, int | float) and math.isfinite(v)


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def curve_area(curve: list[tuple[int, float]]) -> float | None:
    """Area under one validation curve ÷ its step span (its mean height; lower = fell sooner)."""
    pts = sorted((s, v) for s, v in curve if is_number(v))
    if len(pts) < 2:
        return pts[0][1] if pts else None
    area = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:], strict=False))
    return area / (pts[-1][0] - pts[0][0])


def curve_summary(curves: list[list[tuple[int, float]]], steps: int) -> Curve:
    """Mean ± std validation curve over seeds, the mean near ¼, ½, 1 of training, and area ÷ span."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            if is_number(value):
                by_step.setdefault(int(step), []).append(float(value))
    xs = sorted(by_step)
    ys = [statistics.fmean(by_step[s]) for s in xs]
    sd = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in xs]
    at = []  # the last evaluation at or before each fraction of training (None when there was none yet)
    for frac in FRACTIONS:
        before = [i for i, s in enumerate(xs) if s <= max(1, round(frac * steps))]
        at.append(
            CurvePoint(
                fraction=frac,
                step=xs[before[-1]] if before else None,
                value=ys[before[-1]] if before else None,
            )
        )
    return Curve(steps=xs, mean=ys, std=sd, at=at, auc=curve_area(list(zip(xs, ys, strict=True))))


def _series(hidden: dict[str, Any], key: str) -> list[tuple[int, float]]:
    values = hidden.get(key) or []
    index = hidden.get("time_index") or list(range(len(values)))
    return [(int(t), float(v)) for t, v in zip(index, values, strict=False) if is_number(v)]


def trace_stats(probes: dict[str, Any] | None) -> dict[str, float | None]:
    """From a run's last per-time-step trace: ‖h_t‖ max ÷ min over all steps and over t ≥ START, and the
    orders of magnitude ‖∂ℓ/∂h_t‖ falls from the last step back to the first (None without a trace);
    with the numbers of `series_stats` from its per-estimate series."""
    hidden = (probes or {}).get("hidden") or {}
    norms = _series(hidden, "hidden_norms")
    out: dict[str, float | None] = {
        "hidden_spread": None,
        "hidden_spread_late": None,
        "grad_orders": None,
        **series_stats(probes),
    }
    if norms and min(v for _, v in norms) > 0:
        out["hidden_spread"] = max(v for _, v in norms) / min(v for _, v in norms)
        late = [v for t, v in norms if t >= START]
        if late:
            out["hidden_spread_late"] = max(late) / min(late)
    grads = _series(hidden, "grad_norms")
    if len(grads) > 1 and grads[-1][1] > 0:
        first = max(grads[0][1], 1e-45)  # an underflow to 0 counts as float32's smallest value
        out["grad_orders"] = math.log10(grads[-1][1] / first)
    return out


def _late(series: list[Any]) -> list[Any]:
    """The estimates of a run's second half (by count: the last ⌈n/2⌉)."""
    return series[len(series) // 2 :]


def series_stats(probes: dict[str, Any] | None) -> dict[str, float | None]:
    """From a run's per-estimate series (the probes' "fisher_series"): over its scale-invariant sets,
    the orders of magnitude η/‖w‖² moved from the first estimate to the last ("elr_orders", mean over
    weight sets of log10 last/first) and the mean angular update over the second half of the estimates
    ("angular_late"); the mean η·λ_max(H) over the second half ("eta_lambda_late") and at the first
    estimate ("eta_lambda_first"), each from estimates within their tolerance (lower bounds left out).
    None where the run has no such numbers."""
    series = (probes or {}).get("fisher_series") or []
    out: dict[str, float | None] = dict.fromkeys(SERIES_KEYS)
    if not series:
        return out
    first = {g["name"]: g.get("effective_lr") for g in fisher_weight_sets(series[0])}
    last = {g["name"]: g.get("effective_lr") for g in fisher_weight_sets(series[-1])}
    orders = [
        math.log10(last[n] / first[n])
        for n in first
        if len(series) > 1 and is_number(first[n]) and is_number(last.get(n)) and first[n] > 0 and last[n] > 0
    ]
    if orders:
        out["elr_orders"] = statistics.fmean(orders)
    angles = [
        statistics.fmean(a)
        for e in _late(series)
        if (a := [g["angular_update"] for g in fisher_weight_sets(e) if is_number(g.get("angular_update"))])
    ]
    if angles:
        out["angular_late"] = statistics.fmean(angles)
    # an estimate that stopped short of its tolerance is a lower bound, not a value: left out of the mean,
    # and the first estimate ("at initialisation") is None when it is one
    sharp = [e for e in series if is_number(e.get("eta_hessian_lambda_max"))]
    if sharp and not sharp[0].get("hessian_lower_bound"):
        out["eta_lambda_first"] = sharp[0]["eta_hessian_lambda_max"]
    late = [e["eta_hessian_lambda_max"] for e in _late(sharp) if not e.get("hessian_lower_bound")]
    if late:
        out["eta_lambda_late"] = statistics.fmean(late)
    return out


def aggregate(label: str, spec: dict[str, Any], records: list[SeedRecord], metric: str) -> CellResult:
    """One arm (a run label, or a sweep's combination) over its seeds."""
    values = [r.get("value") for r in records]
    mean, std = mean_std([v for v in values if is_number(v)])
    per_seed_traces = [r.get("traces") or trace_stats(r.get("probes")) for r in records]
    traces = {}
    for key in TRACE_NAMES:
        vals = [t.get(key) for t in per_seed_traces]
        m, s = mean_std([v for v in vals if v is not None])
        if m is not None and s is not None:
            traces[key] = TraceStat(values=vals, mean=m, std=s)
    return CellResult(
        label=label,
        spec=spec,
        seeds=[r["seed"] for r in records],
        values=values,
        n=sum(is_number(v) for v in values),
        mean=mean,
        std=std,
        statuses=[r.get("status") for r in records],
        messages=[r.get("message") for r in records if r.get("status") not in ("completed", None)],
        wall_time=sum(r.get("wall_time") or 0.0 for r in records),
        aucs=[curve_area(r.get("curve") or []) for r in records],
        curve=curve_summary([r.get("curve") or [] for r in records], int(spec.get("steps") or 1)),
        traces=traces,
    )
