"""`create_app(api_base)`: the Dash dashboard (Flask server at `.server`), mounted at "/" by `normlab up`.

Pages live one a file in `frontend/pages/` (Dash Pages); the shell here carries what every page
shares: navigation, the 100 ms redraw tick, the live-status store and the "copy link" button. The
clientside functions (one EventSource per tab, extendData appends) are in `assets/normlab.js`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import dash
from dash import ClientsideFunction, Input, Output, State, dcc, html

from frontend import auth_box, ids

HERE = Path(__file__).parent
PAGES = ["lab", "runs", "compare", "run", "invariance", "presets"]
NAV = [("Lab", "/"), ("Runs", "/runs"), ("Compare", "/compare"), ("Presets", "/presets"),
       ("Invariance", "/invariance")]


def shell() -> html.Div:
    return html.Div(className="shell", children=[
        dcc.Location(id=ids.URL),
        dcc.Interval(id=ids.TICK, interval=100, disabled=True),
        dcc.Store(id=ids.LIVE_STATUS, data={}),
        dcc.Store(id=ids.PRESENT, data=False),
        html.Header(className="topbar", children=[
            dcc.Link("normlab", href="/", className="brand"),
            html.Span("Layer Normalization, live", className="tagline"),
            html.Nav(id=ids.NAV, className="nav", children=[
                dcc.Link(label, href=href, className="nav-link") for label, href in NAV]),
            html.Div(className="share", children=[
                auth_box.auth_box(),
                html.Button("Copy link", id=ids.COPY_LINK, className="btn small",
                            title="Copy a link to exactly this view (runs, panels, smoothing)"),
                html.Span(id=ids.COPY_DONE, className="copied", role="status"),
            ]),
        ]),
        html.Main(dash.page_container, className="page"),
        html.Div(id=ids.WATCH_SINK, hidden=True),
        html.Div(id=ids.URL_SINK, hidden=True),
    ])


def create_app(api_base: str = "") -> dash.Dash:
    """The dashboard. `api_base` = where the HTTP API lives ("" = the same origin, as `normlab up`)."""
    app = dash.Dash(
        __name__, use_pages=True, pages_folder="", assets_folder=str(HERE / "assets"),
        suppress_callback_exceptions=True, title="normlab", update_title=None,
    )
    app.server.config["NORMLAB_API_BASE"] = api_base.rstrip("/")
    for name in PAGES:  # importing a page registers it (once per process); its callbacks go on this app
        importlib.import_module(f"frontend.pages.{name}").register(app)
    app.layout = shell()
    _register_shell(app)
    auth_box.register(app)  # the token box of a shared lab server (hardening helper's module)

    @app.callback(*[Output(i, "style") for i in (auth_box.TOKEN_INPUT, auth_box.TOKEN_SAVE,
                                                  auth_box.TOKEN_FORGET, auth_box.WHOAMI)],
                  Input(auth_box.WHOAMI, "children"))
    def _auth_visible(text):
        # On a server without tokens (the default) the box would only be clutter.
        hidden = {"display": "none"}
        return (hidden,) * 4 if text == auth_box.describe({"auth": "off"}) or not text else ({},) * 4
    return app


def _register_shell(app: dash.Dash) -> None:
    app.clientside_callback(ClientsideFunction("normlab", "watch"),
                            Output(ids.WATCH_SINK, "children"),
                            Output(ids.TICK, "disabled", allow_duplicate=True), Input(ids.WATCH, "data"),
                            prevent_initial_call="initial_duplicate")
    app.clientside_callback(ClientsideFunction("normlab", "drainCurves"),
                            Output(ids.CURVES_SINK, "children"), Input(ids.TICK, "n_intervals"),
                            State(ids.CURVES_MAP, "data"), prevent_initial_call=True)
    app.clientside_callback(ClientsideFunction("normlab", "status"),
                            Output(ids.LIVE_STATUS, "data"),
                            Output(ids.TICK, "disabled", allow_duplicate=True),
                            Input(ids.TICK, "n_intervals"), prevent_initial_call=True)
    app.clientside_callback(ClientsideFunction("normlab", "urlState"),
                            Output(ids.URL_SINK, "children"), Input(ids.URL_STATE, "data"))
    app.clientside_callback(ClientsideFunction("normlab", "copyLink"),
                            Output(ids.COPY_DONE, "children"), Input(ids.COPY_LINK, "n_clicks"),
                            prevent_initial_call=True)
    app.clientside_callback(ClientsideFunction("normlab", "present"),
                            Output(ids.PRESENT, "data"), Input(ids.URL, "search"))
