"""A "where does it help?" map as a Plotly figure (pure: the group's `map` in, a figure dict out).

One point per axis value: Δ = A − B (paired by seed) with error bars of ± z paired standard errors, the
zero line, and the side of zero where A beats B shaded, so a point whose bar stays inside the shade
supports the claim there. Axis values with no finished seed yet are left out; the figure is rebuilt
on every poll, so points appear as runs end.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import dcc

from frontend import figures
from normlab_client.group_models import ScaleMapPublic

FAVOURS_TEXT = {"a": "favours {a}", "b": "favours {b}", "neither": "within noise"}


def map_figure(m: ScaleMapPublic, present: bool = False) -> dict[str, Any]:
    """The map's figure: points with ± z·SE bars, a zero line and the claim's side shaded; `present`:
    presentation mode's type and size (figures.apply_theme)."""
    pts = [(p, p.difference) for p in m.points if p.difference is not None]
    z, a, b = m.z, m.a, m.b
    fig = go.Figure()
    xs = [str(v) for v in m.values]
    fig.add_trace(
        go.Scatter(
            x=[str(p.value) for p, _ in pts],
            y=[d for _, d in pts],
            error_y={"type": "data", "array": [z * (p.se or 0.0) for p, _ in pts], "visible": True},
            mode="markers+lines",
            marker={"size": 9, "color": figures.norm_color(a)},
            line={"dash": "dot", "width": 1, "color": figures.norm_color(a)},
            name=f"Δ = {a} − {b}",
            text=[
                f"n = {p.n} seeds; " + FAVOURS_TEXT.get(p.favours or "", "").format(a=a, b=b) for p, _ in pts
            ],
            hovertemplate="%{x}: Δ = %{y:.4g}<br>%{text}<extra></extra>",
        )
    )
    fig.add_hline(y=0, line={"color": "#555", "width": 1})
    below = m.claim_side == "below"
    # a rectangle from zero to the plot's edge (paper-relative bound on y is not available, so span a
    # range wider than every bar)
    reach = max([abs(d) + z * (p.se or 0.0) for p, d in pts] or [1.0]) * 1.5 or 1.0
    fig.add_hrect(
        y0=0,
        y1=-reach if below else reach,
        fillcolor=figures.norm_color(a),
        opacity=0.08,
        line_width=0,
        annotation_text=f"{a} better",
        annotation_position="bottom left" if below else "top left",
    )
    if present:
        figures.apply_theme(fig, True, height=260)
    fig.update_layout(
        xaxis={"title": m.axis_name or m.axis, "type": "category", "categoryarray": xs},
        yaxis={"title": f"Δ {m.metric} ({a} − {b})", "range": [-reach, reach]},
        showlegend=False,
        height=260 + (120 if present else 0),
        margin={"l": 90 if present else 60, "r": 10, "t": 10, "b": 70 if present else 40},
    )
    figure: dict[str, Any] = fig.to_dict()
    return figure


def map_graph(m: ScaleMapPublic, present: bool = False) -> dcc.Graph:
    """The map as a graph for a preset card (its class lets browser tests find it)."""
    return dcc.Graph(figure=map_figure(m, present), className="map-graph", config={"displayModeBar": False})
