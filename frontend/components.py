"""Small pieces every page uses: status badges, the per-page stores, field rows, cards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dash import dcc, html
from dash.development.base_component import Component

from frontend import figures, ids, status

# The mode bar exports PNG and SVG; no Plotly logo, and never plotly.js's "Share chart" button (on by
# default in plotly.js 4): a lab server must not offer to upload its data to Plotly's cloud.
GRAPH_CONFIG: dcc.Graph.Config = {
    "displaylogo": False,
    "showSendToCloud": False,
    "plotlyServerURL": "",
    "modeBarButtonsToRemove": ["sendChartToCloud"],
    "responsive": True,
    "toImageButtonOptions": {"format": "png", "scale": 2, "filename": "normlab"},
    "modeBarButtonsToAdd": ["toImage"],
}


def badge(run_status: str) -> html.Span:
    return html.Span(
        run_status, className="badge", style=status.badge_style(run_status), title=f"status: {run_status}"
    )


def page_stores(
    watch: dict[str, Any] | None = None, url_state: dict[str, Any] | None = None
) -> list[Component]:
    """The stores each page carries: what the tab's stream follows, and the state mirrored into the URL."""
    return [
        dcc.Store(id=ids.WATCH, data={**(watch or {"cursor": {}}), "terminal": status.TERMINAL}),
        dcc.Store(id=ids.URL_STATE, data=url_state),
    ]


def svg_button(graph_id: str) -> html.Button:
    """Plotly's mode bar saves PNG; this saves the same figure as SVG (assets/normlab.js)."""
    data_attrs: dict[str, Any] = {"data-graph": graph_id}  # read by assets/normlab.js
    return html.Button(
        "Download SVG",
        className="btn small svg-download controls",
        title="Save this figure as an SVG file",
        **data_attrs,
    )


def curves_graph(figure: dict[str, Any], trace_map: dict[str, Any]) -> list[Component]:
    return [
        dcc.Graph(id=ids.CURVES, figure=figure, config=GRAPH_CONFIG, className="graph curves"),
        dcc.Store(id=ids.CURVES_MAP, data=trace_map),
        html.Span(id=ids.CURVES_SINK, hidden=True),
        svg_button(ids.CURVES),
    ]


def format_wait(seconds: float) -> str:
    """'under a minute', '4 min', '1 h 05 min': an estimate, so no seconds."""
    if seconds < 60:
        return "under a minute"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def queue_note(run: dict[str, Any]) -> str:
    """'position 3 in the queue, about 4 min' for a queued run ('' otherwise)."""
    position = run.get("queue_position")
    if run.get("status") != "queued" or not position:
        return ""
    wait = run.get("queue_wait_s")
    about = f", about {format_wait(wait)}" if isinstance(wait, int | float) else ""
    return f"position {position} in the queue{about}"


def run_chip(run: dict[str, Any], status: str | None = None, color: str | None = None) -> html.Div:
    """A run as one line: colour swatch (as in the figure), label, status badge, link to its page, and
    while it waits, its place in the queue."""
    color = color or figures.norm_color(run.get("spec", {}).get("norm", ""))
    status = status or run.get("status", "")
    note = queue_note(run) if status == "queued" else ""
    return html.Div(
        className="run-chip",
        children=[
            html.Span(className="swatch", style={"background": color}),
            dcc.Link(figures.run_label(run), href=f"/run/{run['id']}", className="run-link"),
            badge(status),
            *([html.Span(note, className="queue-note")] if note else []),
        ],
    )


def run_chips(
    runs: list[dict[str, Any]], color_by: str = "norm", live: dict[str, Any] | None = None
) -> list[html.Div]:
    colors = figures.colors_for(runs, color_by)
    return [run_chip(r, (live or {}).get(r["id"]), colors[r["id"]][0]) for r in runs]


def card(title: str, children: Sequence[Component | str], className: str = "") -> html.Section:
    return html.Section(className=f"card {className}".strip(), children=[html.H2(title), *children])


def error_box(message: str) -> html.Div:
    return html.Div(message, className="alert", role="alert")
