"""Theory lines on a run's probe charts (normlab.theory), where the run's spec and probes say they apply:
the √(2ηλ) equilibrium, the SGD norm-growth law and uᵀFu = 0, with the points that depart shaded."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from normlab.theory import angular_equilibrium, curvature_departs, growth_departs, growth_step
from normlab_client.events import fisher_weight_sets


def angular_line(spec: dict[str, Any] | None) -> float | None:
    """√(2ηλ/(1+μ)) for an SGD run with weight decay (the equilibrium of its scale-invariant sets'
    angular update), else None: Adam's step is not covered by that law, and without decay there is none."""
    if not spec or spec.get("optimizer") != "sgd":
        return None
    lr, wd = spec.get("lr"), spec.get("weight_decay") or 0.0
    if not lr or wd <= 0:
        return None
    return angular_equilibrium(float(lr), float(wd), float(spec.get("momentum") or 0.0))


def draw_angular(
    fig: go.Figure, spec: dict[str, Any] | None, steps: list[int], row: int, col: int, legend: str
) -> bool:
    """The equilibrium as a dashed line over the run's steps on the effective-step panel (a trace, like
    the stability line, so it is in the panel's legend and its log axis); whether it applied."""
    value = angular_line(spec)
    if value is None or not steps:
        return False
    fig.add_trace(
        go.Scatter(
            x=[steps[0], steps[-1]],
            y=[value, value],
            name="√(2ηλ/(1+μ)): equilibrium",
            legend=legend,
            mode="lines",
            line={"dash": "dash", "color": "#555", "width": 1},
        ),
        row=row,
        col=col,
    )
    return True


DEPART = {"color": "rgba(213, 94, 0, 0.35)", "size": 16}  # translucent halo: where a run leaves its law


def norm_growth_applies(spec: dict[str, Any] | None) -> bool:
    """The SGD norm-growth law holds for plain SGD (no momentum) without weight decay, all run long."""
    if not spec or spec.get("optimizer") != "sgd":
        return False
    if (spec.get("momentum") or 0.0) != 0 or (spec.get("weight_decay") or 0.0) != 0:
        return False
    changes = spec.get("interventions") or []
    return not any(c.get("momentum") or c.get("weight_decay") for c in changes if isinstance(c, dict))


def growth_points(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per whole-matrix scale-invariant set, per Fisher event that measured ‖w_t‖, ‖g_t‖, η (from η/‖w‖²)
    and ‖w_{t+1}‖: {"step", "predicted" ‖w_{t+1}‖, "measured", "departs"}. Row sets report medians over
    rows, for which the law is not exact, so they are left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        for g in fisher_weight_sets(e["payload"]):
            need = (g.get(k) for k in ("weight_norm", "grad_norm", "effective_lr", "weight_norm_next"))
            if not g.get("scale_invariant") or g.get("kind") != "matrix" or None in need:
                continue
            norm, grad, next_norm = g["weight_norm"], g["grad_norm"], g["weight_norm_next"]
            lr = g["effective_lr"] * norm * norm
            out.setdefault(g["name"], []).append(
                {
                    "step": e["step"],
                    "predicted": growth_step(norm, grad, lr),
                    "measured": next_norm,
                    "departs": growth_departs(norm, next_norm, grad, lr),
                }
            )
    return out


def draw_norm_growth(
    fig: go.Figure,
    spec: dict[str, Any] | None,
    events: list[dict[str, Any]],
    colors: dict[str, str],
    row: int,
    col: int,
    legend: str,
) -> bool:
    """On the ‖w‖ panel: the law's ‖w_{t+1}‖ = √(‖w_t‖² + η²‖g_t‖²) at each probe step (open circles in
    the set's colour, one step after the measured ‖w_t‖), and a shaded halo where the measured step's
    growth departs from η²‖g_t‖² by more than 10 %; whether it applied."""
    if not norm_growth_applies(spec):
        return False
    points = growth_points(events)
    for name, pts in points.items():
        fig.add_trace(
            go.Scatter(
                x=[p["step"] + 1 for p in pts],
                y=[p["predicted"] for p in pts],
                name=f"law: ‖w_(t+1)‖² = ‖w_t‖² + η²‖g_t‖² ({name})",
                legend=legend,
                mode="markers",
                marker={"symbol": "circle-open", "size": 9, "color": colors.get(name, "#555")},
                customdata=[p["measured"] for p in pts],
                hovertemplate=f"{name}: law %{{y:.6g}}, measured %{{customdata:.6g}}<extra></extra>",
            ),
            row=row,
            col=col,
        )
    off = [(p["step"] + 1, p["measured"]) for pts in points.values() for p in pts if p["departs"]]
    _shade_departures(fig, off, "departs from the law (> 10 %)", legend, row, col)
    return bool(points)


def _shade_departures(
    fig: go.Figure, off: list[tuple[int, float]], name: str, legend: str, row: int, col: int
) -> None:
    """A translucent halo at each (step, value) where a run leaves the line its theory draws."""
    if not off:
        return
    fig.add_trace(
        go.Scatter(
            x=[x for x, _ in off],
            y=[y for _, y in off],
            name=name,
            legend=legend,
            mode="markers",
            marker=DEPART,
            hoverinfo="skip",
        ),
        row=row,
        col=col,
    )


def draw_zero_curvature(
    fig: go.Figure, events: list[dict[str, Any]], row: int, col: int, legend: str
) -> bool:
    """On the uᵀFu panel, when the run has scale-invariant sets: the line uᵀFu = 0 their theory puts them
    on, and a shaded halo at each point of such a set whose |uᵀFu| exceeds 10⁻³ of its trace; whether
    it applied."""
    steps = [e["step"] for e in events]
    invariant = [
        (e["step"], g)
        for e in events
        for g in fisher_weight_sets(e["payload"])
        if g.get("scale_invariant") and g.get("along_w_curvature") is not None
    ]
    if not invariant or not steps:
        return False
    fig.add_trace(
        go.Scatter(
            x=[steps[0], steps[-1]],
            y=[0.0, 0.0],
            name="uᵀFu = 0: scale-invariant",
            legend=legend,
            mode="lines",
            hoverinfo="skip",
            line={"dash": "dash", "color": "#555", "width": 1},
        ),
        row=row,
        col=col,
    )
    off = [
        (step, g["along_w_curvature"])
        for step, g in invariant
        if g.get("trace_ww") is not None and curvature_departs(g["along_w_curvature"], g["trace_ww"])
    ]
    _shade_departures(fig, off, "departs from 0 (> 10⁻³ of the trace)", legend, row, col)
    return True
