"""Plotly figures of a run's hidden-state probes (pure functions: the run's `hidden` events in, figure
dict out): hidden-state and gradient norms over time steps as heatmaps (training step × time step), or,
for a feed-forward run, each layer's statistics over training."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend import figures

ORDINAL = figures.ORDINAL_COLORS  # feed-forward layers over training: an order, not a normalizer
MAX_SNAPSHOTS = 150  # heatmap rows; past this, snapshots are thinned evenly (first and last kept) and said so
T = TypeVar("T")


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


def thin(rows: list[T], limit: int = MAX_SNAPSHOTS) -> list[T]:
    """At most `limit` rows, evenly spaced, the first and the last always kept."""
    if len(rows) <= limit:
        return rows
    picks = sorted({round(k * (len(rows) - 1) / (limit - 1)) for k in range(limit)})
    return [rows[i] for i in picks]


def _heat(fig: go.Figure, events: list[dict[str, Any]], key: str, label: str, row: int) -> tuple[bool, int]:
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
            },  # no title: the subplot's title names the colour ("‖h_t‖ over training (log colour)"),
            # and a title beside the bar ran into the snapshot plot's axis title
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


def hidden_figure(
    events: list[dict[str, Any]], present: bool = False, ended: bool | None = False
) -> dict[str, Any]:
    """‖h_t‖ and ‖∂L/∂h_t‖: training step × time step heatmaps (log colour) and the latest snapshot.

    Feed-forward runs have no time steps: their panel shows each layer's summed-input spread and
    activation norm over training instead. `ended`: the run has ended and all its stored events were
    read (only then may an empty panel say none were recorded); None while they are still loading.
    """
    events = [e for e in events if e.get("kind", "hidden") == "hidden"]
    if events and "layers" in events[-1]["payload"]:
        return _layers_figure(events, present)
    fig = make_subplots(
        rows=2,
        cols=2,
        column_widths=[0.58, 0.42],
        vertical_spacing=0.16,
        horizontal_spacing=0.16,
        subplot_titles=[
            "‖h_t‖ over training (log colour)",
            "‖h_t‖, latest snapshot",
            "‖∂L/∂h_t‖ over training (log colour)",
            "‖∂L/∂h_t‖, latest snapshot",
        ],
    )
    has_h, n_h = _heat(fig, events, "hidden_norms", "‖h_t‖", 1)
    has_g, n_g = _heat(fig, events, "grad_norms", "‖∂L/∂h_t‖", 2)
    for row, what in ((1, "‖h_t‖"), (2, "‖∂L/∂h_t‖")):
        fig.update_xaxes(title_text="time step t", row=row)
        fig.update_yaxes(title_text="training step", row=row, col=1)
        fig.update_yaxes(title_text=f"{what} (L2 norm)", row=row, col=2)
    if not (has_h or has_g):
        figures.empty(
            fig,
            "This run recorded no hidden-state snapshots."
            if ended
            else "Loading the run's hidden-state snapshots…"
            if ended is None
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
        # at the very top, above the subplot titles (which sit just over their plots)
        fig.update_layout(
            title={
                "text": note,
                "font": {"size": 12},
                "x": 0,
                "y": 0.995,
                "yref": "container",
                "yanchor": "top",
            },
            margin={"t": 90 if present else 75},
        )
    figure: dict[str, Any] = fig.to_plotly_json()
    return figure


def _layers_figure(events: list[dict[str, Any]], present: bool) -> dict[str, Any]:
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
    fig.update_yaxes(title_text="std of summed inputs", row=1, col=1)
    fig.update_yaxes(title_text="activation norm (L2)", row=1, col=2)
    figures.apply_theme(fig, present, height=360)
    figure: dict[str, Any] = fig.to_plotly_json()
    return figure
