"""Compare: overlay any runs; EMA smoothing; colour by normalizer or batch size; x by step or wall time.
The URL carries it all (runs, smooth, color, x, panels), so a link reproduces the view."""

from __future__ import annotations

import dash
from dash import Input, Output, State, callback, dcc, html

from frontend import components, data, figures, ids, logic
from frontend.api_client import ApiError


def _run_options(client, selected: list[dict]) -> list[dict]:
    try:
        recent = client.runs(limit=200)["items"]
    except ApiError:
        recent = []
    seen, out = set(), []
    for r in selected + recent:
        if r["id"] not in seen:
            seen.add(r["id"])
            out.append({"label": f"{figures.run_label(r)} · {r['status']} · {r['id'][:8]}", "value": r["id"]})
    return out


def layout(runs=None, smooth=None, color=None, x=None, panels=None, present=None, **_) -> html.Div:
    state = logic.compare_state({"runs": runs, "smooth": smooth, "color": color, "x": x, "panels": panels})
    present_on = logic.is_present({"present": present})
    try:
        bundle = data.curves_bundle(state["runs"], smoothing=state["smooth"], color_by=state["color"],
                                    x_mode=state["x"], panels=state["panels"], present=present_on)
        options = _run_options(data.api(), bundle["runs"])
    except ApiError as exc:
        return html.Div([components.error_box(exc.detail), *components.page_stores()])
    missing = bundle["missing"]
    found = [rid for rid in state["runs"] if rid not in missing]  # the link's order, not the legend's
    controls = components.card("Compare", className="controls", children=[
        html.Div(className="field wide", children=[
            html.Label("Runs", className="label"),
            dcc.Dropdown(id=ids.CMP_RUNS, options=options, value=found,
                         multi=True, placeholder="Pick runs to overlay"),
        ]),
        html.Div(className="control-row", children=[
            html.Div(className="field", children=[
                html.Label("Smoothing (EMA)", className="label"),
                dcc.Slider(id=ids.CMP_SMOOTH, min=0, max=0.99, step=0.01, value=state["smooth"],
                           marks={0: "0", 0.5: "0.5", 0.9: "0.9", 0.99: "0.99"},
                           tooltip={"placement": "bottom", "always_visible": False}),
            ]),
            html.Div(className="field", children=[
                html.Label("Colour by", className="label"),
                dcc.RadioItems(id=ids.CMP_COLOR, value=state["color"], inline=True, options=[
                    {"label": " normalizer", "value": "norm"},
                    {"label": " batch size", "value": "batch_size"}]),
            ]),
            html.Div(className="field", children=[
                html.Label("x-axis", className="label"),
                dcc.RadioItems(id=ids.CMP_X, value=state["x"], inline=True, options=[
                    {"label": " step", "value": "step"}, {"label": " wall time", "value": "time"}]),
            ]),
            html.Div(className="field", children=[
                html.Label("Panels", className="label"),
                dcc.Checklist(id=ids.CMP_PANELS, value=state["panels"], inline=True, options=[
                    {"label": " training loss", "value": "loss"},
                    {"label": " validation loss", "value": "val"},
                    {"label": " metric", "value": "metric"}]),
            ]),
        ]),
        html.Div(id=ids.CMP_MESSAGE, className="message error" if missing else "message",
                 children=f"Not found (deleted?): {', '.join(missing)}" if missing else ""),
    ])
    return html.Div(className="compare-page", children=[
        controls,
        html.Div(className="card", children=[
            html.Div(id="cmp-legend", className="run-list",
                     children=components.run_chips(bundle["runs"], state["color"])),
            dcc.Store(id="cmp-runs-data", data={"runs": bundle["runs"], "color": state["color"]}),
            *components.curves_graph(bundle["figure"], bundle["map"]),
        ]),
        *components.page_stores(bundle["watch"], {**state, "runs": found}),
    ])


@callback(
    Output(ids.CURVES, "figure", allow_duplicate=True),
    Output(ids.CURVES_MAP, "data", allow_duplicate=True),
    Output(ids.WATCH, "data", allow_duplicate=True), Output(ids.URL_STATE, "data", allow_duplicate=True),
    Output("cmp-runs-data", "data"), Output(ids.CMP_MESSAGE, "children"),
    Input(ids.CMP_RUNS, "value"), Input(ids.CMP_SMOOTH, "value"), Input(ids.CMP_COLOR, "value"),
    Input(ids.CMP_X, "value"), Input(ids.CMP_PANELS, "value"),
    State(ids.PRESENT, "data"),  # State: its update on page load must not rebuild the figure twice
    prevent_initial_call=True)
def on_view_change(runs, smooth, color, x, panels, present):
    state = logic.compare_state({"runs": runs or [], "smooth": smooth, "color": color, "x": x,
                                 "panels": panels})
    try:
        bundle = data.curves_bundle(state["runs"], smoothing=state["smooth"], color_by=state["color"],
                                    x_mode=state["x"], panels=state["panels"], present=bool(present))
    except ApiError as exc:
        return (dash.no_update,) * 5 + (exc.detail,)
    missing = bundle["missing"]
    return (bundle["figure"], bundle["map"], bundle["watch"], state,
            {"runs": bundle["runs"], "color": state["color"]},
            f"Not found (deleted?): {', '.join(missing)}" if missing else "")


@callback(Output("cmp-legend", "children"), Input("cmp-runs-data", "data"),
          Input(ids.LIVE_STATUS, "data"), prevent_initial_call=True)
def on_legend(runs_data, live):
    runs_data = runs_data or {}
    return components.run_chips(runs_data.get("runs", []), runs_data.get("color", "norm"), live)


dash.register_page(__name__, path="/compare", name="Compare", title="normlab · Compare", order=2)
