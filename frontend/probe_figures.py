"""Plotly figures of a run's probes (pure functions: the run's probe events in, figure dict out):
hidden-state and gradient norms over time steps as heatmaps, and the Fisher curvature panels."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend import figures

ORDINAL = figures.ORDINAL_COLORS  # feed-forward layers over training: an order, not a normalizer
# Fisher panel: layers and weight groups are names, not an order: neighbours get clearly different hues
# (Okabe–Ito again), and a name keeps its hue in every subplot.
CATEGORY = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442"]
MAX_SNAPSHOTS = 150  # heatmap rows; past this, snapshots are thinned evenly (first and last kept) and said so


def _log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Colour-bar ticks for log10 values at round norms (1-2-5 per decade, or whole decades when the
    range is wide), labelled with the norm itself; never fewer than two."""
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    span = hi - lo
    mult = (1, 2, 5) if span < 2.5 else (1,)
    step = 1 if span < 6 else math.ceil(span / 5)
    vals = [math.log10(m) + k for k in range(math.floor(lo), math.ceil(hi) + 1, step) for m in mult]
    vals = [v for v in vals if lo - 1e-9 <= v <= hi + 1e-9]
    if len(vals) < 3:  # a narrow range: its ends too, so the bar always reads
        vals = sorted({lo, *vals, hi})
    return vals, [f"{10**v:.2g}" for v in vals]


def step_edges(steps: list[int]) -> list[float]:
    """Band edges for snapshots at these training steps: each band reaches halfway to its neighbours, the
    outer bands end at the first and last recorded step (uneven snapshots are drawn uneven, and the
    axis stays within the steps recorded)."""
    if len(steps) == 1:
        return [steps[0] - 0.5, steps[0] + 0.5]
    mids = [(a + b) / 2 for a, b in zip(steps, steps[1:], strict=False)]
    return [float(steps[0]), *mids, float(steps[-1])]


def thin(rows: list, limit: int = MAX_SNAPSHOTS) -> list:
    """At most `limit` rows, evenly spaced, the first and the last always kept."""
    if len(rows) <= limit:
        return rows
    picks = sorted({round(k * (len(rows) - 1) / (limit - 1)) for k in range(limit)})
    return [rows[i] for i in picks]


def _heat(fig: go.Figure, events: list[dict], key: str, label: str, row: int) -> tuple[bool, int]:
    """(drawn, snapshots recorded): one heatmap row per kept snapshot at its training step."""
    found = sorted(
        ((e["step"], e["payload"].get(key)) for e in events if e["payload"].get(key)), key=lambda r: r[0]
    )
    rows = list({s: v for s, v in found}.items())  # one row per step (a replayed event is not a new row)
    if not rows:
        return False, 0
    kept = thin(rows)
    width = max(len(v) for _, v in kept)
    z = [[math.log10(x) if x and x > 0 else None for x in v] + [None] * (width - len(v)) for _, v in kept]
    flat = [x for r in z for x in r if x is not None]
    lo, hi = (min(flat), max(flat)) if flat else (0.0, 1.0)
    tickvals, ticktext = _log_ticks(lo, hi)
    steps = [s for s, _ in kept]
    edges = step_edges(steps)
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=list(range(1, width + 1)),
            y=edges,
            colorscale="Cividis",
            zmin=lo,
            zmax=hi,
            customdata=[[s] * width for s in steps],
            # the colour bar sits right next to its heatmap, not past the snapshot plot
            colorbar={
                "tickvals": tickvals,
                "ticktext": ticktext,
                "len": 0.4,
                "y": 0.79 if row == 1 else 0.21,
                "x": 0.505,
                "xanchor": "left",
                "thickness": 12,
                "title": {"text": label, "side": "right"},
            },
            hovertemplate="time step %{x}, training step %{customdata}: "
            + label
            + " = 10^%{z:.2f}<extra></extra>",
        ),
        row=row,
        col=1,
    )
    ticks = {"tickvals": steps, "ticktext": [str(s) for s in steps]} if len(steps) <= 8 else {}
    fig.update_yaxes(range=[edges[0], edges[-1]], autorange=False, row=row, col=1, **ticks)
    last_step, last = rows[-1]
    fig.add_trace(
        go.Scatter(
            x=list(range(1, len(last) + 1)),
            y=last,
            mode="lines+markers",
            name=f"{label} at step {last_step}",
            line={"color": "#0072B2"},
        ),
        row=row,
        col=2,
    )
    fig.update_yaxes(type="log", row=row, col=2, **figures.log_ticks(last))
    return True, len(rows)


def hidden_figure(events: list[dict], present: bool = False, ended: bool = False) -> dict:
    """‖h_t‖ and ‖∂L/∂h_t‖: training step × time step heatmaps (log colour) and the latest snapshot.

    Feed-forward runs have no time steps: their panel shows each layer's summed-input spread and
    activation norm over training instead.
    """
    events = [e for e in events if e.get("kind", "hidden") == "hidden"]
    if events and "layers" in events[-1]["payload"]:
        return _layers_figure(events, present)
    fig = make_subplots(
        rows=2,
        cols=2,
        column_widths=[0.58, 0.42],
        vertical_spacing=0.16,
        horizontal_spacing=0.14,
        subplot_titles=[
            "‖h_t‖ over training (log colour)",
            "‖h_t‖, latest snapshot",
            "‖∂L/∂h_t‖ over training (log colour)",
            "‖∂L/∂h_t‖, latest snapshot",
        ],
    )
    has_h, n_h = _heat(fig, events, "hidden_norms", "‖h_t‖", 1)
    has_g, n_g = _heat(fig, events, "grad_norms", "‖∂L/∂h_t‖", 2)
    for row in (1, 2):
        fig.update_xaxes(title_text="time step t", row=row)
        fig.update_yaxes(title_text="training step", row=row, col=1)
    if not (has_h or has_g):
        figures.empty(
            fig,
            "This run recorded no hidden-state snapshots."
            if ended
            else "Waiting for the first hidden-state snapshot…",
        )
    figures.apply_theme(fig, present, height=620 if has_h or has_g else 160)
    fig.update_layout(showlegend=False)
    recorded = max(n_h, n_g)
    if recorded > MAX_SNAPSHOTS:
        note = (
            f"{recorded} snapshots recorded; the heatmaps show {MAX_SNAPSHOTS}, evenly thinned "
            "(first and latest kept)"
        )
        fig.update_layout(title={"text": note, "font": {"size": 12}, "x": 0})
    return fig.to_plotly_json()


def _layers_figure(events: list[dict], present: bool) -> dict:
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["Summed-input std per layer", "Activation norm per layer"]
    )
    names = [layer["name"] for layer in events[-1]["payload"]["layers"]]
    steps = [e["step"] for e in events]
    for k, name in enumerate(names):
        color = ORDINAL[k % len(ORDINAL)]
        for col, field in ((1, "summed_std"), (2, "act_norm")):
            ys = [
                next((layer.get(field) for layer in e["payload"]["layers"] if layer["name"] == name), None)
                for e in events
            ]
            fig.add_trace(
                go.Scatter(
                    x=steps, y=ys, name=name, legendgroup=name, showlegend=col == 1, line={"color": color}
                ),
                row=1,
                col=col,
            )
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


def _has(events: list[dict], field: str) -> bool:
    return any(g.get(field) is not None for e in events for g in e["payload"].get("groups", []))


def _step_panel(events: list[dict]) -> tuple[str, str]:
    """(field, title) of the effective-step panel: the measured ‖Δw‖/‖w‖ per update when the run
    reports it (labelled by its optimizer), else η/‖w‖² (the step plain SGD would take)."""
    if _has(events, "effective_step"):
        opt = events[-1]["payload"].get("optimizer") or next(
            (g.get("optimizer") for g in events[-1]["payload"].get("groups", []) if g.get("optimizer")), ""
        )
        return "effective_step", f"Effective step ‖Δw‖/‖w‖ per update{f' ({opt}, measured)' if opt else ''}"
    return "effective_lr", "Effective learning rate η/‖w‖² (plain SGD's step)"


def fisher_figure(
    events: list[dict], present: bool = False, ended: bool = False, blocked: bool = False
) -> dict:
    """Fisher curvature over training. Top row, per layer: the Fisher trace, and η·λ_max against the
    stability line 2. Below, per scale-invariant weight group: ‖w‖, the effective step, uᵀFu along w and
    the gain curvature. One legend beside each subplot; a layer or group keeps its colour everywhere.
    `blocked`: the run warned that no estimate fits its budget (the empty panel then points to it)."""
    events = [e for e in events if e.get("kind", "fisher") == "fisher"]
    step_field, step_title = _step_panel(events)
    titles = [
        "Fisher trace per layer",
        "η·λ_max against 2 (stable below)",
        "‖w‖ per weight group",
        step_title,
        "uᵀFu along w (→ 0 when scale-invariant)",
        "Gain curvature per group",
    ]
    fig = make_subplots(rows=3, cols=2, vertical_spacing=0.11, horizontal_spacing=0.25, subplot_titles=titles)
    steps = [e["step"] for e in events]
    if not events:
        why = (
            "No Fisher estimate fits this run's probe budget: see the warning above."
            if blocked
            else "This run recorded no Fisher estimates."
            if ended
            else "Waiting for the first Fisher estimate…"
        )
        figures.empty(fig, why)
        figures.apply_theme(fig, present, height=160)
        return fig.to_plotly_json()
    last = events[-1]["payload"]
    estimators = last.get("trace_estimator", {})
    for k, layer in enumerate(last.get("trace", {})):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[e["payload"].get("trace", {}).get(layer) for e in events],
                name=f"{layer} ({estimators.get(layer, '?')})",
                legend="legend",
                line={"color": CATEGORY[k % 8]},
            ),
            row=1,
            col=1,
        )
    _eta_lambda(fig, events, steps)
    group_names = [name for name, _ in _group_series(events, "weight_norm")]
    for legend, (row, col), field in (
        ("legend3", (2, 1), "weight_norm"),
        ("legend4", (2, 2), step_field),
        ("legend5", (3, 1), "along_w_curvature"),
        ("legend6", (3, 2), "gain_curvature"),
    ):
        for name, ys in _group_series(events, field):
            k = group_names.index(name) if name in group_names else len(group_names)
            fig.add_trace(
                go.Scatter(x=steps, y=ys, name=name, legend=legend, line={"color": CATEGORY[k % 8]}),
                row=row,
                col=col,
            )
    fig.update_xaxes(title_text="training step")
    traces = (v for e in events for v in (e["payload"].get("trace") or {}).values())
    fig.update_yaxes(type="log", row=1, col=1, **figures.log_ticks(traces))
    fig.update_yaxes(
        type="log",
        row=2,
        col=2,
        **figures.log_ticks(g.get(step_field) for e in events for g in e["payload"].get("groups", [])),
    )
    fig.update_yaxes(exponentformat="power", row=3, col=1)
    figures.apply_theme(fig, present, height=900)
    _place_legends(fig, present)
    cost = last.get("cost_steps")
    note = "Trace estimator per layer in its legend"
    if cost is not None:
        note += f" · each estimate costs ≈ {cost:.2g} training steps"
    if last.get("empirical") is not None:
        note += " · empirical Fisher also recorded (labelled as such)"
    fig.update_layout(title={"text": note, "font": {"size": 12}, "x": 0})
    return fig.to_plotly_json()


def _eta_lambda(fig: go.Figure, events: list[dict], steps: list[int]) -> None:
    """η·λ_max(F) (and of the Hessian when measured) with the line 2 that gradient descent crosses when it
    stops being stable."""
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[e["payload"].get("eta_lambda_max") for e in events],
            name="η·λ_max(F)",
            legend="legend2",
            line={"color": "#0072B2"},
        ),
        row=1,
        col=2,
    )
    hess = [e["payload"].get("eta_hessian_lambda_max") for e in events]
    derived = any(e["payload"].get("hessian_lambda_max") is not None for e in events)
    if all(h is None for h in hess) and derived:
        hess = []
        for e in events:
            p = e["payload"]
            lr = p.get("eta_lambda_max", 0) / p["lambda_max"] if p.get("lambda_max") else None
            h = p.get("hessian_lambda_max")
            hess.append(h * lr if h is not None and lr is not None else None)
    if any(h is not None for h in hess):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=hess,
                name="η·λ_max(Hessian)",
                legend="legend2",
                line={"color": "#D55E00", "dash": "dot"},
            ),
            row=1,
            col=2,
        )
    fig.add_trace(
        go.Scatter(
            x=[steps[0], steps[-1]] if steps else [],
            y=[2.0, 2.0],
            mode="lines",
            name="2: stability line",
            legend="legend2",
            hoverinfo="skip",
            line={"color": "#D55E00", "dash": "dash", "width": 1},
        ),
        row=1,
        col=2,
    )
    # the line stays in view even while η·λ is far below it
    values = [v for v in [*(e["payload"].get("eta_lambda_max") for e in events), *hess] if v is not None]
    fig.update_yaxes(range=[0, max([2.3, *values]) * 1.08], row=1, col=2)


def _place_legends(fig: go.Figure, present: bool) -> None:
    """Each subplot's legend beside it, at its top (the left column's in the gap between the columns)."""
    size = 16 if present else 11
    for n, legend in enumerate(("legend", "legend2", "legend3", "legend4", "legend5", "legend6"), start=1):
        xaxis, yaxis = fig.layout[f"xaxis{'' if n == 1 else n}"], fig.layout[f"yaxis{'' if n == 1 else n}"]
        fig.update_layout(
            {
                legend: {
                    "x": xaxis.domain[1] + 0.01,
                    "xanchor": "left",
                    "y": yaxis.domain[1],
                    "yanchor": "top",
                    "orientation": "v",
                    "font": {"size": size},
                    "bgcolor": "rgba(255,255,255,0.85)",
                }
            }
        )
    fig.update_layout(showlegend=True, margin={"r": 190, "t": 80})
