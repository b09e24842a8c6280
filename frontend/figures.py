"""Plotly figures for the dashboard, built from API JSON (pure functions: data in, figure dict out).

One colour per normalizer everywhere (Okabe–Ito, colour-blind safe). The curves figure also returns a
*trace map* that tells the browser which trace each streamed series extends, with the EMA state, so
live points continue the server-built history without a redraw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend.smoothing import SMOOTHED_PANELS, format_elapsed, hovertemplate
from normlab_client.catalog import NORMS, TASKS
from normlab_client.events import TERMINAL_STATUSES, RunStatus
from normlab_client.palette import (
    NORM_COLORS,  # one colour per normalizer, shared with normlab_client
    RAW_OPACITY,
    ema,
)
from normlab_client.spec import TRANSFORMER_TASKS

# For colouring by batch size (or anything categorical in order): Okabe–Ito with neighbours far apart
# in hue (sky blue and blue, nearly alike on a projector, are never next to each other).
ORDINAL_COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]

PANELS = {  # panel key -> (title, how to pick the series of a run)
    "loss": "Training loss",
    "val": "Validation loss",
    "metric": "Validation metric",
}
METRIC_TITLES = {
    "accuracy": "Validation accuracy",
    "bpc": "Validation bits per character",
    "mse": "Validation MSE",
}
SERIES_LABELS = {
    "train_loss": "train loss",
    "val_loss": "val loss",
    "accuracy": "val accuracy",
    "bpc": "val bpc",
}
# a loss axis before its first point: 0.01 to 10 (log10), where the losses of every task start and
# fall, instead of plotly's default for an empty log axis (0.1 to 10,000)
EMPTY_LOG_RANGE = (-2.0, 1.0)
MAX_POINTS = 20_000  # live appends (Plotly.extendTraces) keep at most this many points per trace


def log_ticks(values: Iterable[float | None]) -> dict[str, Any]:
    """Tick values for a log axis over many decades (so live points never leave it unlabelled), as
    dense as the data's current span allows: 1-2-3-5 within a decade, 1-2-5, 1-3, or powers of 10."""
    pos = [v for v in values if isinstance(v, int | float) and v > 0 and math.isfinite(v)]
    span = math.log10(max(pos) / min(pos)) if pos else 1.0
    mult = (1, 2, 3, 5) if span < 1 else (1, 2, 5) if span < 2 else (1, 3) if span < 3.5 else (1,)
    vals = [m * 10.0**k for k in range(-9, 10) for m in mult]
    return {"tickvals": vals, "ticktext": [f"{v:g}" for v in vals]}


def norm_color(norm: str) -> str:
    return NORM_COLORS.get(norm, "#7F7F7F")


def arm_color(norm: Any, index: int) -> str:
    """A group arm's colour: its normalizer's, else the index-th of the ordinal palette."""
    return norm_color(norm) if norm in NORMS else ORDINAL_COLORS[index % len(ORDINAL_COLORS)]


def metric_key(task: str) -> str | None:
    """The scalars field of a task's metric panel (None for regression: its metric is the val loss)."""
    metric = TASKS[task].metric if task in TASKS else "accuracy"
    return metric if metric in ("accuracy", "bpc") else None


def run_label(run: dict[str, Any]) -> str:
    """A short legend label: normalizer (with its Transformer position or Weight Standardization), batch
    size, seed (and task when it is not digits)."""
    spec = run.get("spec", {})
    norm = str(spec.get("norm", "?"))
    if spec.get("task") in TRANSFORMER_TASKS and norm != "none":
        norm += f" {spec.get('ln_position') or 'pre'}-LN"
    if spec.get("weight_standardization"):
        norm += "+WS"
    label = f"{norm} · bs {spec.get('batch_size', '?')} · seed {spec.get('seed', 0)}"
    if spec.get("task") and spec.get("task") != "digits":
        label += f" · {spec['task']}"
    return label


# After the coloured field, the spec fields whose differences the line dash shows, in this order.
DASH_FIELDS = (
    "task",
    "lr",
    "optimizer",
    "weight_decay",
    "hidden_size",
    "layers",
    "cell",
    "seq_len",
    "steps",
    "seed",
)


def colors_for(runs: list[dict[str, Any]], color_by: str) -> dict[str, tuple[str, str]]:
    """run id -> (colour, dash). Colour by normalizer (fixed palette) or by batch size (ordinal); the
    dash by everything else that differs between the runs (the other of the two first, then task,
    learning rate, …), so two runs drawn alike differ in nothing shown. A fork drawn beside
    its parent is dashed: its own points start after the fork step, so the chart shows the parent's
    curve solid up to there (drawn once) and each branch dashed past it."""
    sizes = sorted({r["spec"].get("batch_size", 0) for r in runs})
    other = "norm" if color_by == "batch_size" else "batch_size"
    varying = [
        f
        for f in (other, *DASH_FIELDS)
        if len({json.dumps(r["spec"].get(f), sort_keys=True) for r in runs}) > 1
    ]
    keys = sorted({_dash_key(r["spec"], varying) for r in runs})
    drawn = {r["id"] for r in runs}
    out = {}
    for r in runs:
        spec = r["spec"]
        if color_by == "batch_size":
            color = ORDINAL_COLORS[sizes.index(spec.get("batch_size", 0)) % len(ORDINAL_COLORS)]
        else:
            color = norm_color(spec.get("norm", ""))
        dash = DASHES[keys.index(_dash_key(spec, varying)) % len(DASHES)]
        if (spec.get("parent") or {}).get("id") in drawn:
            dash = "dash"
        out[r["id"]] = (color, dash)
    return out


def _dash_key(spec: dict[str, Any], fields: list[str]) -> str:
    return json.dumps([spec.get(f) for f in fields], sort_keys=True)


def _series_for(panel: str, task: str) -> str | None:
    if panel == "loss":
        return "train_loss"
    if panel == "val":
        return "val_loss"
    return metric_key(task)


def _elapsed_at(steps: list[int], history: dict[str, Any]) -> list[float | None]:
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
        template="plotly_white",
        height=height + (120 if present else 0),
        font={"size": size},
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        uirevision="keep",
        hovermode="closest",
        legend={"orientation": "h", "y": -0.18, "x": 0, "font": {"size": size}},
    )
    # tick labels are never hidden at the graph's edge: plotly would otherwise measure every label's
    # box on each redraw (a forced layout per live append) to find the ones past it
    fig.update_xaxes(ticklabeloverflow="allow")
    fig.update_yaxes(ticklabeloverflow="allow")
    if present:
        # high contrast from the grid and the labels, no axis lines: a line colour turns plotly's axis
        # lines on, and plotly draws a subplot's line before it has placed an axis whose traces are all
        # still empty (a validation panel before the first evaluation), as a path of NaN coordinates
        fig.update_xaxes(gridcolor="#BBBBBB", zerolinecolor="#888888", tickfont={"color": "black"})
        fig.update_yaxes(gridcolor="#BBBBBB", zerolinecolor="#888888", tickfont={"color": "black"})
        # thick lines for the room; the raw series under a smoothed curve stays thin and faint. Only
        # line traces: a heatmap has no `line`, and setting one on it raises.
        fig.update_traces(
            line={"width": 4},
            selector=lambda t: t.type == "scatter" and not str(t.meta).endswith(":raw"),
        )
    fig.update_annotations(font={"size": size + 1})
    return fig


def curves_figure(
    runs: list[dict[str, Any]],
    histories: dict[str, dict[str, Any]],
    *,
    panels: list[str] | None = None,
    smoothing: float = 0.0,
    color_by: str = "norm",
    x_mode: str = "step",
    present: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(figure, trace map) for the loss / validation / metric curves of several runs, side by side."""
    panels = [p for p in (panels or list(PANELS)) if p in PANELS] or ["loss"]
    tasks = {r["spec"].get("task", "digits") for r in runs}
    if tasks and all(metric_key(t) is None for t in tasks) and len(panels) > 1:
        panels = [p for p in panels if p != "metric"]  # regression: the validation loss is the metric
    titles = []
    for p in panels:
        if p == "metric" and len(tasks) == 1 and next(iter(tasks)) in TASKS:
            titles.append(METRIC_TITLES.get(TASKS[next(iter(tasks))].metric, PANELS[p]))
        elif p == "val" and tasks and all(metric_key(t) is None for t in tasks):
            titles.append("Validation loss (MSE)")
        else:
            titles.append(PANELS[p])
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles, horizontal_spacing=0.07)
    colors = colors_for(runs, color_by)
    trace_map: dict[str, Any] = {
        "runs": {},
        "x": x_mode,
        "smooth": smoothing,
        "max_points": MAX_POINTS,
        "color": color_by,
        "panels": panels,
    }
    index = 0
    seen_values: dict[str, list[Any]] = {}
    for run in runs:
        rid, task = str(run["id"]), str(run["spec"].get("task", "digits"))
        color, dash = colors[rid]
        history = histories.get(rid) or {"series": {}}
        entries: list[dict[str, Any]] = []
        for col, panel in enumerate(panels, start=1):
            key = _series_for(panel, task)
            if key is None:
                continue
            s = history.get("series", {}).get(key) or {"step": [], "value": []}
            steps = list(s["step"])
            values = list(s["value"])
            weight = smoothing if panel in SMOOTHED_PANELS else 0.0  # sparse evaluations: raw
            smoothed, (acc, n) = ema(values, weight) if weight > 0 else (values, (0.0, 0))
            elapsed = _elapsed_at(steps, history)
            xs = elapsed if x_mode == "time" else steps
            # hover: [step, wall time since the start, raw value]; live points carry the same (normlab.js)
            custom = [[st, format_elapsed(el), v] for st, el, v in zip(steps, elapsed, values, strict=True)]
            if history.get("downsampled") and s.get("min") and s.get("max"):
                # each bucket's min..max as a faint band behind its mean: spikes stay visible
                fig.add_trace(
                    go.Scatter(
                        x=list(xs) + list(xs)[::-1],
                        y=list(s["max"]) + list(s["min"])[::-1],
                        fill="toself",
                        mode="lines",
                        line={"width": 0},
                        fillcolor=color,
                        opacity=0.22,
                        hoverinfo="skip",
                        showlegend=False,
                        legendgroup=rid,
                        meta=f"{rid}:range",
                    ),
                    row=1,
                    col=col,
                )
                index += 1
            mode = "lines" if panel == "loss" else "lines+markers"  # evaluations are sparse: markers
            raw_index = None
            if weight > 0:  # the raw series, faint, under the smoothed one (TensorBoard's look)
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=values,
                        mode=mode,
                        marker={"size": 4},
                        customdata=custom,
                        opacity=RAW_OPACITY,
                        line={"color": color, "dash": dash, "width": 1},
                        connectgaps=True,
                        showlegend=False,
                        legendgroup=rid,
                        meta=f"{rid}:raw",
                        name=run_label(run),
                        hoverinfo="skip",
                    ),
                    row=1,
                    col=col,
                )
                raw_index = index
                index += 1
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=smoothed,
                    mode=mode,
                    customdata=custom,
                    marker={"size": 5},
                    name=run_label(run),
                    legendgroup=rid,
                    showlegend=not entries,
                    line={"color": color, "dash": dash, "width": 2},
                    connectgaps=True,
                    meta=rid,
                    hovertemplate=hovertemplate(SERIES_LABELS[key], weight > 0),
                ),
                row=1,
                col=col,
            )
            entries.append(
                {
                    "i": index,
                    "raw": raw_index,
                    "key": key,
                    "last": steps[-1] if steps else -1,
                    "acc": acc,
                    "n": n,
                    "smooth": weight,  # the browser continues this series' EMA with its own weight
                }
            )
            index += 1
        trace_map["runs"][rid] = entries
        for e in entries:
            for i in (e["i"], e["raw"]):
                if i is not None:
                    seen_values.setdefault(e["key"], []).extend(fig.data[i].y or [])
    fig.update_xaxes(title_text="wall time (s)" if x_mode == "time" else "training step")
    waiting: list[str] = []  # axes drawn over a placeholder range until their first point (normlab.js)
    for col, panel in enumerate(panels, start=1):
        suffix = "" if col == 1 else str(col)
        if panel in ("loss", "val"):
            key = "train_loss" if panel == "loss" else "val_loss"
            fig.update_yaxes(type="log", **log_ticks(seen_values.get(key, [])), row=1, col=col)
            if runs and not _positive(seen_values.get(key, [])):
                fig.update_yaxes(range=list(EMPTY_LOG_RANGE), row=1, col=col)
                waiting.append(f"yaxis{suffix}")
                last = _last_step(runs)
                if x_mode == "step" and last:
                    fig.update_xaxes(range=[0, last], row=1, col=col)
                    waiting.append(f"xaxis{suffix}")
        elif panel == "metric" and tasks and all(metric_key(t) == "accuracy" for t in tasks):
            fig.update_yaxes(range=[0, 1.02], row=1, col=col)
    trace_map["waiting_axes"] = waiting
    if not runs:
        empty(fig, "No runs yet: start one, or pick runs to compare")
    elif (
        index
        and all(not fig.data[i].x for i in range(index))
        and all(r.get("status") in TERMINAL_STATUSES for r in runs)
    ):
        cancelled = all(r.get("status") == RunStatus.CANCELLED for r in runs)
        empty(
            fig,
            "Cancelled before the first training points."
            if cancelled
            else "These runs ended without recording any training points.",
        )
    elif index and all(not fig.data[i].x for i in range(index)):
        # live runs that have not reported yet; the page's live append removes this note (name "waiting")
        fig.add_annotation(
            text="Waiting for the first training points…",
            name="waiting",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            font={"size": 15, "color": "#555"},
        )
    apply_theme(fig, present, height=380)
    # margins fixed to fit the tick labels, the axis titles and the legend: with automatic margins each
    # live append whose new range changes a label's width would move them and make plotly draw it twice
    fig.update_xaxes(automargin=False)
    fig.update_yaxes(automargin=False)
    # the legend below the x-axis titles, never over them: its top a fixed number of pixels under the
    # plot (ticks and title take ~55 px normal, ~75 px presented), converted to paper units
    height, margin = (
        fig.layout.height,
        ({"l": 90, "r": 30, "t": 50, "b": 150} if present else {"l": 66, "r": 24, "t": 50, "b": 110}),
    )
    below_px = 78 if present else 58
    # room below for every row of the legend (plotly pushes a legend that overflows the figure up, over
    # the x titles): rows of about two entries presented, three otherwise; the plot keeps its height
    shown = sum(1 for t in fig.data if t.showlegend is not False)
    row_px, per_row = (32, 2) if present else (22, 3)
    rows = -(-shown // per_row)
    need = below_px + 12 + row_px * rows
    if need > margin["b"]:
        height += need - margin["b"]
        margin["b"] = need
    fig.update_layout(
        height=height,
        margin=margin,
        legend={"y": -below_px / (height - margin["t"] - margin["b"]), "yanchor": "top"},
    )
    # zoom and pan survive appends and rebuilds, but not a change of x units (steps vs seconds)
    fig.update_layout(uirevision=f"curves-{x_mode}")
    return fig.to_plotly_json(), trace_map


def _positive(values: Iterable[float | None]) -> bool:
    """Whether a log axis has anything to show: a finite value above zero."""
    return any(isinstance(v, int | float) and v > 0 and math.isfinite(v) for v in values)


def _last_step(runs: list[dict[str, Any]]) -> int | None:
    """The longest of the runs' planned step counts (None when no run states one)."""
    steps = [s for r in runs if isinstance(s := (r.get("spec") or {}).get("steps"), int) and s > 0]
    return max(steps) if steps else None


def empty(fig: go.Figure, text: str) -> None:
    """An empty figure says why it is empty instead of showing bare axes."""
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_annotations(visible=False)
    fig.add_annotation(
        text=text,
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        font={"size": 16, "color": "#555"},
    )
