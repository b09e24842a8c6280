"""Small pieces every page uses: status badges, the per-page stores, field rows, cards."""

from __future__ import annotations

from typing import Any

from dash import dcc, html

from frontend import figures, ids, status

# Any: dcc.Graph's `config` type is a TypedDict these plain dicts (shared, extended below) do not name
# The mode bar exports PNG and SVG; no Plotly logo, and never plotly.js's "Share chart" button (on by
# default in plotly.js 4): a lab server must not offer to upload its data to Plotly's cloud.
GRAPH_CONFIG: Any = {
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


def page_stores(watch: dict | None = None, url_state: dict | None = None) -> list:
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


def curves_graph(figure: dict, trace_map: dict) -> list:
    return [
        dcc.Graph(id=ids.CURVES, figure=figure, config=GRAPH_CONFIG, className="graph curves"),
        dcc.Store(id=ids.CURVES_MAP, data=trace_map),
        html.Span(id=ids.CURVES_SINK, hidden=True),
        svg_button(ids.CURVES),
    ]


def run_chip(run: dict, status: str | None = None, color: str | None = None) -> html.Div:
    """A run as one line: colour swatch (as in the figure), label, status badge, link to its page."""
    color = color or figures.norm_color(run.get("spec", {}).get("norm", ""))
    return html.Div(
        className="run-chip",
        children=[
            html.Span(className="swatch", style={"background": color}),
            dcc.Link(figures.run_label(run), href=f"/run/{run['id']}", className="run-link"),
            badge(status or run.get("status", "")),
        ],
    )


def run_chips(runs: list[dict], color_by: str = "norm", live: dict | None = None) -> list:
    colors = figures.colors_for(runs, color_by)
    return [run_chip(r, (live or {}).get(r["id"]), colors[r["id"]][0]) for r in runs]


def card(title: str, children: list, className: str = "") -> html.Section:
    return html.Section(className=f"card {className}".strip(), children=[html.H2(title), *children])


def error_box(message: str) -> html.Div:
    return html.Div(message, className="alert", role="alert")
