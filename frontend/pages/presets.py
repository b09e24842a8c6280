"""Presets: the paper's figures as a gallery; one click starts a preset's runs and opens Compare."""

from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, callback, ctx, dcc, html, no_update

from frontend import components, data, figures, ids, logic
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE


def preset_card(p: dict) -> html.Div:
    chips = [html.Span([html.Span(className="swatch",
                                  style={"background": figures.norm_color(r.get("norm", ""))}), label],
                       className="chip")
             for r, label in zip(p["runs"], p.get("labels") or [r.get("norm") for r in p["runs"]],
                                 strict=False)]
    return html.Div(className="preset card", children=[
        html.H3(p["title"]), html.Div(p.get("paper_ref", ""), className="muted"),
        html.P(p.get("shows", ""), className="shows"),
        html.Div(chips, className="chips"),
        html.Div(f"Expect: {p['expect']}" if p.get("expect") else "", className="expect"),
        html.Button(f"Start {len(p['runs'])} runs and compare",
                    id={"type": ids.PRESET_START, "name": p["name"]}, className="btn primary"),
    ])


def layout(**_) -> html.Div:
    try:
        presets = data.api().presets()
    except ApiError as exc:
        return html.Div([components.error_box(exc.detail), *components.page_stores()])
    return html.Div(className="presets-page", children=[
        html.H2("The paper's figures, ready to run"),
        html.Div(id=ids.PRESET_MESSAGE, className="message", role="status"),
        html.Div([preset_card(p) for p in presets], className="gallery"),
        dcc.Location(id=ids.PRESET_GO, refresh="callback-nav"),
        *components.page_stores(),
    ])


def start_preset(preset: dict, token: str | None = None) -> tuple[list[str], str]:
    """POST each of the preset's runs; (run ids, problem message or '')."""
    run_ids, problems = [], []
    for spec in preset["runs"]:
        try:
            run_ids.append(data.api(token).create_run(spec)["id"])
        except ApiError as exc:
            problems.append(exc.detail)
    return run_ids, "; ".join(problems)


@callback(Output(ids.PRESET_GO, "href"), Output(ids.PRESET_MESSAGE, "children"),
          Input({"type": ids.PRESET_START, "name": ALL}, "n_clicks"), State(TOKEN_STORE, "data"),
          prevent_initial_call=True)
def on_start(clicks, token):
    if not ctx.triggered_id or not any(clicks):
        return no_update, no_update
    name = ctx.triggered_id["name"]
    presets = {p["name"]: p for p in data.api().presets()}
    run_ids, problem = start_preset(presets[name], token)
    if not run_ids:
        return no_update, f"Could not start {name}: {problem}"
    panels = ["loss", "val", "metric"]
    return "/compare" + logic.encode_query({"runs": run_ids, "panels": panels}), problem


dash.register_page(__name__, path="/presets", name="Presets", title="normlab · Presets", order=3)
