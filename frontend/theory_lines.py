"""Theory lines on a run's probe charts (normlab.theory), where the run's spec says they apply."""

from __future__ import annotations

import plotly.graph_objects as go

from normlab.theory import angular_equilibrium


def angular_line(spec: dict | None) -> float | None:
    """√(2ηλ/(1+μ)) for an SGD run with weight decay (the equilibrium of its scale-invariant groups'
    angular update), else None: Adam's step is not covered by that law, and without decay there is none."""
    if not spec or spec.get("optimizer") != "sgd":
        return None
    lr, wd = spec.get("lr"), spec.get("weight_decay") or 0.0
    if not lr or wd <= 0:
        return None
    return angular_equilibrium(float(lr), float(wd), float(spec.get("momentum") or 0.0))


def draw_angular(
    fig: go.Figure, spec: dict | None, steps: list[int], row: int, col: int, legend: str
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
