"""The Lab's compact probe strip: for the newest run on the board that records probes, one row of two
small plots — the latest hidden-state gradient snapshot over time steps (or, for a feed-forward run,
each layer's activation norm) and η·λ_max against the stability line 2 — so the Lab shows what the
probes see without opening the run's page."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend import figures
from frontend.probe_figures import bound_markers

HELP = (
    "Left: how strongly the loss reaches back through the time steps (flat is healthy, a steep fall is a "
    "vanishing gradient). Right: step size × sharpest curvature; below the dashed line at 2 training is "
    "stable. The run's page has every panel."
)


def newest_probe_run(runs: list[dict[str, Any]]) -> str | None:
    """The id of the newest run (last on the board) whose spec has probes on, or None."""
    for run in reversed(runs or []):
        if ((run.get("spec") or {}).get("probes") or {}).get("enabled"):
            return str(run["id"])
    return None


def strip_figure(
    hidden: list[dict[str, Any]], fisher: list[dict[str, Any]], present: bool = False
) -> dict[str, Any]:
    """Two small panels from a run's `hidden` and `fisher` events (either may still be empty)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.16,
        subplot_titles=["Gradient reaching each time step", "Stability: η·λ_max (stable below 2)"],
    )
    last = hidden[-1]["payload"] if hidden else {}
    if last.get("grad_norms"):
        g = last["grad_norms"]
        fig.add_trace(
            go.Scatter(x=list(range(1, len(g) + 1)), y=g, mode="lines", name="‖∂L/∂h_t‖"), row=1, col=1
        )
        fig.update_xaxes(title_text="time step t", row=1, col=1)
        fig.update_yaxes(title_text="‖∂L/∂h_t‖ (log)", type="log", row=1, col=1, **figures.log_ticks(g))
    elif last.get("layers"):
        layers = last["layers"]
        fig.add_trace(
            go.Bar(x=[layer["name"] for layer in layers], y=[layer.get("act_norm") for layer in layers]),
            row=1,
            col=1,
        )
        fig.layout.annotations[0].text = "Activation norm per layer (latest)"
        fig.update_yaxes(title_text="activation norm (L2)", row=1, col=1)
    steps = [e["step"] for e in fisher]
    eta = [e["payload"].get("eta_lambda_max") for e in fisher]
    if steps:
        fig.add_trace(
            go.Scatter(x=steps, y=eta, name="η·λ_max", **bound_markers(fisher, "lambda_max")), row=1, col=2
        )
        fig.add_trace(
            go.Scatter(
                x=[steps[0], steps[-1]], y=[2, 2], mode="lines", line={"dash": "dash", "color": "#D55E00"}
            ),
            row=1,
            col=2,
        )
        fig.update_yaxes(range=[0, max([2.3, *(v for v in eta if v is not None)]) * 1.08], row=1, col=2)
    fig.update_xaxes(title_text="training step", row=1, col=2)
    fig.update_yaxes(title_text="η·λ_max (no unit)", row=1, col=2)
    if not fig.data:
        figures.empty(fig, "Waiting for the first probe snapshot…")
    figures.apply_theme(fig, present, height=230)
    fig.update_layout(showlegend=False, margin={"l": 60, "r": 20, "t": 40, "b": 45})
    figure: dict[str, Any] = fig.to_plotly_json()
    return figure
