"""Plotly figures of a run's probes (pure functions: the run's probe events in, figure dict out):
hidden-state and gradient norms over time steps as heatmaps, and the Fisher curvature panels."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend import figures

ORDINAL = figures.ORDINAL_COLORS  # layers and parameter groups: an order, not a normalizer


def _log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Colour-bar ticks for log10 values: five evenly spaced, labelled with the norm itself."""
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    vals = [lo + (hi - lo) * k / 4 for k in range(5)]
    return vals, [f"{10 ** v:.3g}" for v in vals]


def _heat(fig: go.Figure, events: list[dict], key: str, label: str, row: int) -> bool:
    rows = [(e["step"], e["payload"].get(key)) for e in events if e["payload"].get(key)]
    if not rows:
        return False
    width = max(len(v) for _, v in rows)
    z = [[math.log10(x) if x and x > 0 else None for x in v] + [None] * (width - len(v)) for _, v in rows]
    flat = [x for r in z for x in r if x is not None]
    lo, hi = (min(flat), max(flat)) if flat else (0.0, 1.0)
    tickvals, ticktext = _log_ticks(lo, hi)
    fig.add_trace(go.Heatmap(
        z=z, x=list(range(1, width + 1)), y=[s for s, _ in rows], colorscale="Cividis",
        # the colour bar sits right next to its heatmap, not past the snapshot plot
        colorbar={"tickvals": tickvals, "ticktext": ticktext, "len": 0.4, "y": 0.79 if row == 1 else 0.21,
                  "x": 0.505, "xanchor": "left", "thickness": 12},
        hovertemplate="time step %{x}, training step %{y}: 10^%{z:.2f}<extra></extra>",
    ), row=row, col=1)
    last_step, last = rows[-1]
    fig.add_trace(go.Scatter(x=list(range(1, len(last) + 1)), y=last, mode="lines+markers",
                             name=f"{label} at step {last_step}", line={"color": "#0072B2"}),
                  row=row, col=2)
    fig.update_yaxes(type="log", row=row, col=2)
    return True


def hidden_figure(events: list[dict], present: bool = False, ended: bool = False) -> dict:
    """‖h_t‖ and ‖∂L/∂h_t‖: training step × time step heatmaps (log colour) and the latest snapshot.

    Feed-forward runs have no time steps: their panel shows each layer's summed-input spread and
    activation norm over training instead.
    """
    events = [e for e in events if e.get("kind", "hidden") == "hidden"]
    if events and "layers" in events[-1]["payload"]:
        return _layers_figure(events, present)
    fig = make_subplots(rows=2, cols=2, column_widths=[0.58, 0.42], vertical_spacing=0.16,
                        horizontal_spacing=0.14,
                        subplot_titles=["‖h_t‖ over training (log colour)", "‖h_t‖, latest snapshot",
                                        "‖∂L/∂h_t‖ over training (log colour)", "‖∂L/∂h_t‖, latest snapshot"])
    has_h = _heat(fig, events, "hidden_norms", "‖h_t‖", 1)
    has_g = _heat(fig, events, "grad_norms", "‖∂L/∂h_t‖", 2)
    for row in (1, 2):
        fig.update_xaxes(title_text="time step t", row=row)
        fig.update_yaxes(title_text="training step", row=row, col=1)
    if not (has_h or has_g):
        figures.empty(fig, "This run recorded no hidden-state snapshots." if ended else
               "Waiting for the first hidden-state snapshot…")
    figures.apply_theme(fig, present, height=620 if has_h or has_g else 160)
    fig.update_layout(showlegend=False)
    return fig.to_plotly_json()


def _layers_figure(events: list[dict], present: bool) -> dict:
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Summed-input std per layer",
                                                        "Activation norm per layer"])
    names = [layer["name"] for layer in events[-1]["payload"]["layers"]]
    steps = [e["step"] for e in events]
    for k, name in enumerate(names):
        color = ORDINAL[k % len(ORDINAL)]
        for col, field in ((1, "summed_std"), (2, "act_norm")):
            ys = [next((layer.get(field) for layer in e["payload"]["layers"] if layer["name"] == name), None)
                  for e in events]
            fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=name, showlegend=col == 1,
                                     line={"color": color}), row=1, col=col)
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(type="log")
    figures.apply_theme(fig, present, height=360)
    return fig.to_plotly_json()


def _group_series(events: list[dict], field: str) -> list[tuple[str, list]]:
    """(name, values per event) for each scale-invariant group; past 8 groups, min / median / max."""
    names: list[str] = []
    for e in events:
        for g in e["payload"].get("groups", []):
            if g["name"] not in names:
                names.append(g["name"])
    per = [{g["name"]: g.get(field) for g in e["payload"].get("groups", [])} for e in events]
    if len(names) <= 8:
        return [(n, [p.get(n) for p in per]) for n in names]
    out = []
    for label, pick in (("min", min), ("median", lambda v: sorted(v)[len(v) // 2]), ("max", max)):
        ys = []
        for p in per:
            vals = [v for v in p.values() if v is not None]
            ys.append(pick(vals) if vals else None)
        out.append((f"{label} of {len(names)} groups", ys))
    return out


def fisher_figure(events: list[dict], present: bool = False, ended: bool = False) -> dict:
    """Fisher curvature over training: per-layer trace, η·λ_max against 2, ‖w‖, η/‖w‖² and u^T F u."""
    events = [e for e in events if e.get("kind", "fisher") == "fisher"]
    fig = make_subplots(rows=2, cols=3, vertical_spacing=0.2, horizontal_spacing=0.08, subplot_titles=[
        "Fisher trace per layer", "η·λ_max(F) (stable below 2)", "‖w‖ per scale-invariant group",
        "Effective learning rate η/‖w‖²", "u^T F u along w (→ 0)", "Gain curvature"])
    steps = [e["step"] for e in events]
    if not events:
        figures.empty(fig, "This run recorded no Fisher estimates." if ended else
               "Waiting for the first Fisher estimate…")
        figures.apply_theme(fig, present, height=160)
        return fig.to_plotly_json()
    last = events[-1]["payload"]
    estimators = last.get("trace_estimator", {})
    for k, layer in enumerate(last.get("trace", {})):
        est = estimators.get(layer, "?")
        fig.add_trace(go.Scatter(x=steps, y=[e["payload"].get("trace", {}).get(layer) for e in events],
                                 name=f"{layer} ({est})", line={"color": ORDINAL[k % 8]}),
                      row=1, col=1)
    fig.add_trace(go.Scatter(x=steps, y=[e["payload"].get("eta_lambda_max") for e in events],
                             name="η·λ_max(F)", line={"color": "#0072B2"}), row=1, col=2)
    if any(e["payload"].get("eta_hessian_lambda_max") is not None for e in events):
        fig.add_trace(go.Scatter(x=steps, y=[e["payload"].get("eta_hessian_lambda_max") for e in events],
                                 name="η·λ_max(Hessian)", line={"color": "#D55E00", "dash": "dot"}),
                      row=1, col=2)
    elif any(e["payload"].get("hessian_lambda_max") is not None for e in events):
        lrs = [e["payload"].get("eta_lambda_max", 0) / e["payload"]["lambda_max"]
               if e["payload"].get("lambda_max") else None for e in events]
        fig.add_trace(go.Scatter(
            x=steps, y=[(h * lr) if h is not None and lr is not None else None
                        for h, lr in zip((e["payload"].get("hessian_lambda_max") for e in events), lrs,
                                         strict=True)],
            name="η·λ_max(Hessian)", line={"color": "#D55E00", "dash": "dot"}), row=1, col=2)
    fig.add_hline(y=2.0, line={"color": "#D55E00", "dash": "dash"}, row=1, col=2,
                  annotation_text="2 (stability limit)")
    for (row, col), field in (((1, 3), "weight_norm"), ((2, 1), "effective_lr"),
                              ((2, 2), "along_w_curvature"), ((2, 3), "gain_curvature")):
        for k, (name, ys) in enumerate(_group_series(events, field)):
            fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=f"g-{name}",
                                     showlegend=(row, col) == (1, 3), line={"color": ORDINAL[k % 8]}),
                          row=row, col=col)
    fig.update_xaxes(title_text="training step")
    traces = (v for e in events for v in (e["payload"].get("trace") or {}).values())
    fig.update_yaxes(type="log", row=1, col=1, **figures.log_ticks(traces))
    fig.update_yaxes(type="log", row=2, col=1, **figures.log_ticks(
        g.get("effective_lr") for e in events for g in e["payload"].get("groups", [])))
    figures.apply_theme(fig, present, height=600)
    cost = last.get("cost_steps")
    note = "Trace estimator per layer in the legend"
    if cost is not None:
        note += f" · each estimate costs ≈ {cost:.2g} training steps"
    if last.get("empirical") is not None:
        note += " · empirical Fisher also recorded (labelled as such)"
    fig.update_layout(title={"text": note, "font": {"size": 12}, "x": 0})
    return fig.to_plotly_json()
