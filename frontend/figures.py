"""Plotly figures for the dashboard, built from API JSON (pure functions: data in, figure dict out).

One colour per normalizer everywhere (Okabe–Ito, colour-blind safe). The curves figure also returns a
*trace map* that tells the browser which trace each streamed series extends, with the EMA state, so
live points continue the server-built history without a redraw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from normlab.catalog import TASKS
from normlab.events import TERMINAL_STATUSES

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
NORM_COLORS = {
    "layer": "#0072B2",  # blue
    "batch": "#D55E00",  # vermillion
    "weight": "#009E73",  # bluish green
    "rms": "#CC79A7",  # reddish purple
    "group": "#E69F00",  # orange
    "none": "#000000",  # black: the baseline
}
# For colouring by batch size (or anything ordinal): an ordered subset that stays distinct in grey too.
ORDINAL_COLORS = ["#56B4E9", "#0072B2", "#009E73", "#E69F00", "#D55E00", "#CC79A7", "#000000", "#F0E442"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]

PANELS = {  # panel key -> (title, how to pick the series of a run)
    "loss": "Training loss",
    "val": "Validation loss",
    "metric": "Validation metric",
}
METRIC_TITLES = {"accuracy": "Validation accuracy", "bpc": "Validation bits per character",
                 "mse": "Validation MSE"}
MAX_POINTS = 20_000  # live appends (Plotly.extendTraces) keep at most this many points per trace


def log_ticks(values: Iterable[float | None]) -> dict:
    """Tick values for a log axis over many decades (so live points never leave it unlabelled), as
    dense as the data's current span allows: 1-2-3-5 within a decade, 1-2-5, 1-3, or powers of 10."""
    pos = [v for v in values if isinstance(v, int | float) and v > 0 and math.isfinite(v)]
    span = math.log10(max(pos) / min(pos)) if pos else 1.0
    mult = (1, 2, 3, 5) if span < 1 else (1, 2, 5) if span < 2 else (1, 3) if span < 3.5 else (1,)
    vals = [m * 10.0 ** k for k in range(-9, 10) for m in mult]
    return {"tickvals": vals, "ticktext": [f"{v:g}" for v in vals]}


def norm_color(norm: str) -> str:
    return NORM_COLORS.get(norm, "#7F7F7F")


def metric_key(task: str) -> str | None:
    """The scalars field of a task's metric panel (None for regression: its metric is the val loss)."""
    metric = TASKS[task].metric if task in TASKS else "accuracy"
    return metric if metric in ("accuracy", "bpc") else None


def run_label(run: dict) -> str:
    """A short legend label: normalizer, batch size, seed (and task when it is not digits)."""
    spec = run.get("spec", {})
    label = f"{spec.get('norm', '?')} · bs {spec.get('batch_size', '?')} · seed {spec.get('seed', 0)}"
    if spec.get("task") and spec.get("task") != "digits":
        label += f" · {spec['task']}"
    return label


def ema(values: Iterable[float | None], smoothing: float, state: tuple[float, int] = (0.0, 0)):
    """Debiased exponential moving average (TensorBoard's): returns (smoothed list, (accumulator, n)).

    Passing the returned state back continues the average exactly where it stopped, which is how the
    browser extends a smoothed history with live points.
    """
    acc, n = state
    out: list[float | None] = []
    for v in values:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            out.append(v)
            continue
        acc = acc * smoothing + (1.0 - smoothing) * v
        n += 1
        debias = 1.0 - smoothing ** n
        out.append(acc / debias if debias > 0 else v)
    return out, (acc, n)


def colors_for(runs: list[dict], color_by: str) -> dict[str, tuple[str, str]]:
    """run id -> (colour, dash). Colour by normalizer (fixed palette) or by batch size (ordinal);
    the other attribute picks the line dash, so every run stays distinguishable."""
    sizes = sorted({r["spec"].get("batch_size", 0) for r in runs})
    norms = sorted({r["spec"].get("norm", "") for r in runs})
    out = {}
    for r in runs:
        spec = r["spec"]
        if color_by == "batch_size":
            color = ORDINAL_COLORS[sizes.index(spec.get("batch_size", 0)) % len(ORDINAL_COLORS)]
            dash = DASHES[norms.index(spec.get("norm", "")) % len(DASHES)]
        else:
            color = norm_color(spec.get("norm", ""))
            dash = DASHES[sizes.index(spec.get("batch_size", 0)) % len(DASHES)]
        out[r["id"]] = (color, dash)
    return out


def _series_for(panel: str, task: str) -> str | None:
    if panel == "loss":
        return "train_loss"
    if panel == "val":
        return "val_loss"
    return metric_key(task)


def _elapsed_at(steps: list[int], history: dict) -> list[float | None]:
    """Seconds since the run started at each step, interpolated from the 'elapsed' series."""
    el = history.get("series", {}).get("elapsed")
    if not el or not el["step"]:
        return [None] * len(steps)
    xs, ys = el["step"], el["value"]
    out, j = [], 0
    for s in steps:
        while j + 1 < len(xs) and xs[j + 1] <= s:
            j += 1
        if j + 1 < len(xs) and xs[j + 1] != xs[j] and s > xs[j]:
            frac = (s - xs[j]) / (xs[j + 1] - xs[j])
            out.append(ys[j] + frac * (ys[j + 1] - ys[j]))
        else:
            out.append(ys[j])
    return out


def apply_theme(fig: go.Figure, present: bool, height: int) -> go.Figure:
    """Common look; presentation mode: large type, thick lines, high contrast."""
    size = 20 if present else 13
    fig.update_layout(
        template="plotly_white", height=height + (120 if present else 0), font={"size": size},
        margin={"l": 60, "r": 20, "t": 50, "b": 50}, uirevision="keep", hovermode="closest",
        legend={"orientation": "h", "y": -0.18, "x": 0, "font": {"size": size}},
    )
    if present:
        fig.update_xaxes(linecolor="black", gridcolor="#BBBBBB", tickfont={"color": "black"})
        fig.update_yaxes(linecolor="black", gridcolor="#BBBBBB", tickfont={"color": "black"})
        fig.update_traces(line={"width": 4})
    fig.update_annotations(font={"size": size + 1})
    return fig


def curves_figure(runs: list[dict], histories: dict[str, dict], *, panels: list[str] | None = None,
                  smoothing: float = 0.0, color_by: str = "norm", x_mode: str = "step",
                  present: bool = False) -> tuple[dict, dict]:
    """(figure, trace map) for the loss / validation / metric curves of several runs, side by side."""
    panels = [p for p in (panels or list(PANELS)) if p in PANELS] or ["loss"]
    tasks = {r["spec"].get("task", "digits") for r in runs}
    if tasks and all(metric_key(t) is None for t in tasks) and len(panels) > 1:
        panels = [p for p in panels if p != "metric"]  # regression: the validation loss is the metric
    titles = []
    for p in panels:
        if p == "metric" and len(tasks) == 1:
            titles.append(METRIC_TITLES.get(TASKS[next(iter(tasks))].metric, PANELS[p]))
        elif p == "val" and tasks and all(metric_key(t) is None for t in tasks):
            titles.append("Validation loss (MSE)")
        else:
            titles.append(PANELS[p])
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles, horizontal_spacing=0.07)
    colors = colors_for(runs, color_by)
    trace_map: dict[str, Any] = {"runs": {}, "x": x_mode, "smooth": smoothing, "max_points": MAX_POINTS}
    index = 0
    seen_values: dict[str, list] = {}
    for run in runs:
        rid, task = run["id"], run["spec"].get("task", "digits")
        color, dash = colors[rid]
        history = histories.get(rid) or {"series": {}}
        entries = []
        for col, panel in enumerate(panels, start=1):
            key = _series_for(panel, task)
            if key is None:
                continue
            s = history.get("series", {}).get(key) or {"step": [], "value": []}
            steps = list(s["step"])
            values = list(s["value"])
            smoothed, (acc, n) = ema(values, smoothing) if smoothing > 0 else (values, (0.0, 0))
            xs = _elapsed_at(steps, history) if x_mode == "time" else steps
            if history.get("downsampled") and s.get("min") and s.get("max"):
                # each bucket's min..max as a faint band behind its mean: spikes stay visible
                fig.add_trace(go.Scatter(
                    x=list(xs) + list(xs)[::-1], y=list(s["max"]) + list(s["min"])[::-1], fill="toself",
                    mode="lines", line={"width": 0}, fillcolor=color, opacity=0.22, hoverinfo="skip",
                    showlegend=False, legendgroup=rid, meta=f"{rid}:range"), row=1, col=col)
                index += 1
            fig.add_trace(go.Scatter(
                # evaluations are sparse: markers, so a single evaluation is visible too
                x=xs, y=smoothed, mode="lines" if panel == "loss" else "lines+markers",
                marker={"size": 5}, name=run_label(run), legendgroup=rid,
                showlegend=not entries, line={"color": color, "dash": dash, "width": 2},
                connectgaps=True, meta=rid, hovertemplate="%{y:.4g} at %{x}<extra>%{fullData.name}</extra>",
            ), row=1, col=col)
            entries.append({"i": index, "key": key, "last": steps[-1] if steps else -1, "acc": acc, "n": n})
            index += 1
        trace_map["runs"][rid] = entries
        for e in entries:
            seen_values.setdefault(e["key"], []).extend(fig.data[e["i"]].y or [])
    fig.update_xaxes(title_text="wall time (s)" if x_mode == "time" else "training step")
    for col, panel in enumerate(panels, start=1):
        if panel in ("loss", "val"):
            key = "train_loss" if panel == "loss" else "val_loss"
            fig.update_yaxes(type="log", **log_ticks(seen_values.get(key, [])), row=1, col=col)
        elif panel == "metric" and tasks and all(metric_key(t) == "accuracy" for t in tasks):
            fig.update_yaxes(range=[0, 1.02], row=1, col=col)
    if not runs:
        _empty(fig, "No runs yet: start one, or pick runs to compare")
    elif index and all(not fig.data[i].x for i in range(index)) and all(
            r.get("status") in TERMINAL_STATUSES for r in runs):
        _empty(fig, "These runs ended without recording any training points.")
    elif index and all(not fig.data[i].x for i in range(index)):
        # live runs that have not reported yet; the page's live append removes this note (name "waiting")
        fig.add_annotation(text="Waiting for the first training points…", name="waiting", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5, font={"size": 15, "color": "#555"})
    apply_theme(fig, present, height=380)
    # zoom and pan survive appends and rebuilds, but not a change of x units (steps vs seconds)
    fig.update_layout(uirevision=f"curves-{x_mode}")
    return fig.to_plotly_json(), trace_map


def _empty(fig: go.Figure, text: str) -> None:
    """An empty figure says why it is empty instead of showing bare axes."""
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_annotations(visible=False)
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       font={"size": 16, "color": "#555"})


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
        _empty(fig, "This run recorded no hidden-state snapshots." if ended else
               "Waiting for the first hidden-state snapshot…")
    apply_theme(fig, present, height=620 if has_h or has_g else 160)
    fig.update_layout(showlegend=False)
    return fig.to_plotly_json()


def _layers_figure(events: list[dict], present: bool) -> dict:
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Summed-input std per layer",
                                                        "Activation norm per layer"])
    names = [layer["name"] for layer in events[-1]["payload"]["layers"]]
    steps = [e["step"] for e in events]
    for k, name in enumerate(names):
        color = ORDINAL_COLORS[k % len(ORDINAL_COLORS)]
        for col, field in ((1, "summed_std"), (2, "act_norm")):
            ys = [next((layer.get(field) for layer in e["payload"]["layers"] if layer["name"] == name), None)
                  for e in events]
            fig.add_trace(go.Scatter(x=steps, y=ys, name=name, legendgroup=name, showlegend=col == 1,
                                     line={"color": color}), row=1, col=col)
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(type="log")
    apply_theme(fig, present, height=360)
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
        _empty(fig, "This run recorded no Fisher estimates." if ended else
               "Waiting for the first Fisher estimate…")
        apply_theme(fig, present, height=160)
        return fig.to_plotly_json()
    last = events[-1]["payload"]
    estimators = last.get("trace_estimator", {})
    for k, layer in enumerate(last.get("trace", {})):
        est = estimators.get(layer, "?")
        fig.add_trace(go.Scatter(x=steps, y=[e["payload"].get("trace", {}).get(layer) for e in events],
                                 name=f"{layer} ({est})", line={"color": ORDINAL_COLORS[k % 8]}),
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
                                     showlegend=(row, col) == (1, 3), line={"color": ORDINAL_COLORS[k % 8]}),
                          row=row, col=col)
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(type="log", row=1, col=1,
                     **log_ticks(v for e in events for v in (e["payload"].get("trace") or {}).values()))
    fig.update_yaxes(type="log", row=2, col=1, **log_ticks(
        g.get("effective_lr") for e in events for g in e["payload"].get("groups", [])))
    apply_theme(fig, present, height=600)
    cost = last.get("cost_steps")
    note = "Trace estimator per layer in the legend"
    if cost is not None:
        note += f" · each estimate costs ≈ {cost:.2g} training steps"
    if last.get("empirical") is not None:
        note += " · empirical Fisher also recorded (labelled as such)"
    fig.update_layout(title={"text": note, "font": {"size": 12}, "x": 0})
    return fig.to_plotly_json()
