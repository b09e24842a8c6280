"""`create_app(settings)`: the Dash dashboard (Flask server at `.server`), mounted at "/" by `normlab up`.

Pages live one a file in `frontend/pages/` and are discovered (Dash Pages, `pages_folder`): each calls
`dash.register_page` and defines `layout(**query)` and its callbacks at module level. The shell here
carries what every page shares: the navigation (built from `dash.page_registry`), the 100 ms redraw
tick, the live-status store and the "copy link" button. The clientside functions (one EventSource per
tab, appends with Plotly.extendTraces) are in `assets/normlab.js`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dash
import flask
from dash import ClientsideFunction, Input, Output, State, dcc, html
from dash.development.base_component import Component

from frontend import auth_box, embed, fork_view, ids, replication_panel, run_labels
from normlab.settings import Settings

HERE = Path(__file__).parent
# the shell's tick: hands the stream's statuses, probe snapshots and log lines to Dash (the curves are
# appended in the page itself, assets/normlab.js); each tick is a pass of Dash's renderer over the page
TICK_MS = 250
log = logging.getLogger(__name__)
PLOTLY = "assets/vendor/plotly-cartesian-4.1.1.min.js"  # assets/normlab.js points dcc.Graph here
DCC_CHUNK = "_dash-component-suites/dash/dcc/async-{}.js"  # dcc's lazy chunks, as its loader names them
# What the pages that open with a graph load lazily, once their layout has arrived (and then fetch and
# compile, on the first paint's critical path): named in the page's head, they load in parallel with
# Dash's own scripts instead. The URLs are the ones the loaders request, so the preloaded copies serve.
GRAPH_PAGE = (PLOTLY, DCC_CHUNK.format("graph"), DCC_CHUNK.format("dropdown"), DCC_CHUNK.format("slider"))
PRELOAD = {  # by page module (the page Dash Pages' own matching finds for a path)
    "frontend.pages.lab": GRAPH_PAGE,
    "frontend.pages.compare": GRAPH_PAGE,
    "frontend.pages.run": (PLOTLY, DCC_CHUNK.format("graph"), DCC_CHUNK.format("slider")),
}


def preload_links(module: str, prefix: str = "/") -> str:
    """The head tags for what the page `module` (served below the app's `prefix`) loads lazily."""
    # plotly.js itself is run (deferred: after Dash's scripts have started the renderer), not just
    # fetched: its compiling then falls in the wait for the page's layout callback, and
    # dcc.Graph, finding window.Plotly, loads nothing more.
    return "".join(
        f'<script defer src="{prefix}{url}"></script>'
        if url == PLOTLY
        else f'<link rel="preload" as="script" href="{prefix}{url}">'
        for url in PRELOAD.get(module, ())
    )


def page_at(path: str) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """(the registered page at `path`, below the app's prefix, or {}; its path variables; its title),
    matched as Dash Pages' router matches."""
    from dash._pages import _path_to_page

    # both unannotated in Dash
    page, variables = _path_to_page(dash.strip_relative_path(path) or "")  # type: ignore[no-untyped-call]
    variables = variables or {}
    title = page.get("title") if page else None
    return page, variables, title(**variables) if callable(title) else title


def nav_links() -> list[dcc.Link]:
    """One link per page in `dash.page_registry` that asks for one (`nav=False` pages, like a single
    run's, are reached from other pages), in the pages' `order`."""
    pages = sorted((p for p in dash.page_registry.values() if p.get("nav", True)), key=lambda p: p["order"])
    return [dcc.Link(p["name"], href=p["path"], className="nav-link") for p in pages]


def routed_container() -> html.Div:
    """`dash.page_container` (the same ids, so Dash Pages' router still serves every later navigation),
    with the page the browser is opening already in it.

    Stock Dash Pages sends an empty container with the layout; the page appears only after the router's
    callback, a second round trip started once the location component has mounted (on the first
    paint's critical path). The layout request carries the page's URL as its Referer: the page
    is rendered into the container right away, and the location component gets that URL's parts, so it
    finds nothing to report on mounting and the router does not render the page a second time. Without
    a Referer (or when the page fails to render here) the container is the stock empty one."""
    content: Component | None = None
    state: dict[str, Any] = {}
    referrer = flask.request.referrer if flask.has_request_context() else None
    if referrer:
        try:
            content, state = _first_page(referrer)
        except Exception:  # the router renders it (and reports what is wrong) as it always did
            log.warning("rendering %s with the layout failed; the router will", referrer, exc_info=True)
            content, state = None, {}
    return html.Div(
        [
            dcc.Location(id="_pages_location", refresh="callback-nav", **state.get("location", {})),
            html.Div(id="_pages_content", disable_n_clicks=True, children=content),
            # the router's output, as it would have written it (a clientside callback sets the title from it)
            dcc.Store(id="_pages_store", **({"data": state["store"]} if "store" in state else {})),
            html.Div(id="_pages_dummy", disable_n_clicks=True),
        ]
    )


def _first_page(url: str) -> tuple[Component | None, dict[str, Any]]:
    """(the page at `url` rendered, {"location": its parts, "store": the router's store}) or (None, {})."""
    from dash._pages import _parse_query_string  # the router's own reading of the query

    parts = urlsplit(url)
    if parts.netloc != flask.request.host:
        return None, {}
    search = f"?{parts.query}" if parts.query else ""
    page, variables, title = page_at(parts.path)
    layout = page.get("layout") if page else None
    if layout is None:
        return None, {}
    query = _parse_query_string(search)  # type: ignore[no-untyped-call]  # unannotated in Dash
    content = layout(**variables, **query) if callable(layout) else layout
    # exactly what window.location will hold (the fragment never reaches the server; "" is its value
    # without one): a part that differs would be reported on mounting and render the page again
    where = {"pathname": parts.path, "search": search, "hash": "", "href": url}
    return content, {"location": where, "store": {"title": title}}


def shell() -> html.Div:
    return html.Div(
        className="shell",
        children=[
            dcc.Location(id=ids.URL),
            dcc.Interval(id=ids.TICK, interval=TICK_MS, disabled=True),
            dcc.Store(id=ids.LIVE_STATUS, data={}),
            dcc.Store(id=ids.PRESENT, data=False),
            html.Header(
                className="topbar",
                children=[
                    dcc.Link("normlab", href="/", className="brand"),
                    html.Span("Layer Normalization, live", className="tagline"),
                    html.Nav(id=ids.NAV, className="nav", children=nav_links()),
                    # presentation mode for a talk: large type, controls hidden (?present=1 does the same)
                    html.Button(
                        "Present",
                        id=ids.PRESENT_TOGGLE,
                        className="btn small present-toggle",
                        title="Presentation mode: large type and thick lines for a room (toggle)",
                    ),
                    html.Div(
                        className="share",
                        children=[
                            auth_box.auth_box(),
                            html.Button(
                                "Copy link",
                                id=ids.COPY_LINK,
                                className="btn small",
                                title="Copy a link to exactly this view (runs, panels, smoothing)",
                            ),
                            html.Span(id=ids.COPY_DONE, className="copied", role="status"),
                            html.Button(
                                "Embed",
                                id=ids.EMBED,
                                className="btn small",
                                title="Copy an <iframe> of this page's runs as a live chart for slides or "
                                "another site",
                            ),
                            html.Span(id=ids.EMBED_DONE, className="copied", role="status"),
                        ],
                    ),
                ],
            ),
            html.Main(routed_container(), className="page"),
            html.Div(id=ids.WATCH_SINK, hidden=True),
            html.Div(id=ids.URL_SINK, hidden=True),
        ],
    )


def create_app(settings: Settings | None = None, *, api_base: str | None = None) -> dash.Dash:
    """The dashboard, talking to the API at `settings.api_url` ("" = the same origin, as `normlab up`).

    `api_base` overrides the settings (the callers that predate the settings argument pass it)."""
    base = api_base if api_base is not None else (settings.api_url if settings is not None else "")
    _drop_unclaimed_callbacks()
    # name="frontend" (the package): Dash then imports the pages as `frontend.pages.<name>`, the
    # modules' own names, and finds assets/ beside this file.
    app = dash.Dash(
        "frontend",
        use_pages=True,
        pages_folder="pages",
        assets_folder=str(HERE / "assets"),
        suppress_callback_exceptions=True,
        title="normlab",
        update_title="",
        assets_path_ignore=["vendor"],  # loaded on demand, not on every page (assets/vendor/README.md)
    )
    _claim_page_callbacks(app)
    _preload_lazy_scripts(app)
    app.server.config["NORMLAB_API_BASE"] = base.rstrip("/")
    app.layout = shell  # per request: the first page comes with the layout (routed_container)
    _register_shell(app)
    auth_box.register(app)  # the token box of a shared lab server
    # The callbacks of modules several pages share, on every app: as module-level @callback decorators
    # they reached only the first app built in a process (these modules are imported once; the pages
    # afresh for each app), and a second app's forms and records did nothing.
    fork_view.register(app)
    run_labels.register(app)
    replication_panel.register(app)
    embed.install(app.server)  # /embed/... pages, and frame headers for every page
    return app


# What the browser shows until Dash's renderer has drawn the page: the page's outline in grey (a top bar,
# a narrow and a wide card), not Dash's blank "Loading..." — the first paint already reads as the lab.
SKELETON = (
    '<div id="react-entry-point"><div class="_dash-loading nl-skeleton" role="status" '
    'aria-label="normlab is loading"><div class="sk-top"><span class="sk-brand">normlab</span></div>'
    '<div class="sk-grid"><div class="sk-card"></div><div class="sk-card sk-wide"><div class="sk-plot">'
    "</div></div></div></div></div>"
)


def _preload_lazy_scripts(app: dash.Dash) -> None:
    render = app.interpolate_index

    def interpolate_index(**parts: str) -> str:
        if flask.has_request_context():
            page, _, title = page_at(flask.request.path)
            prefix = app.config.requests_pathname_prefix or "/"
            parts["metas"] = parts.get("metas", "") + preload_links(page.get("module", ""), prefix)
            # the page's own title at once (the router's callback, which would set it, has no cause to run)
            parts["title"] = title or parts.get("title", "")
        parts["app_entry"] = SKELETON
        index: str = render(**parts)  # type: ignore[no-untyped-call]  # Dash.interpolate_index is unannotated
        return index

    setattr(app, "interpolate_index", interpolate_index)  # noqa: B010  (an instance override of the method)


# Dash keeps what `dash.callback` registers in module globals until the first request of whichever app
# comes first. Dash imports the pages afresh for every app (so a second app in one process, as in the
# tests, registers them again): each app takes its pages' callbacks right when they were registered,
# and nothing is left over for another app to pick up twice.
def _drop_unclaimed_callbacks() -> None:
    from dash import _callback

    _callback.GLOBAL_CALLBACK_LIST.clear()
    _callback.GLOBAL_CALLBACK_MAP.clear()
    _callback.GLOBAL_INLINE_SCRIPTS.clear()


def _claim_page_callbacks(app: dash.Dash) -> None:
    from dash import _callback

    app.callback_map.update(_callback.GLOBAL_CALLBACK_MAP)
    app._callback_list.extend(_callback.GLOBAL_CALLBACK_LIST)
    app._inline_scripts.extend(_callback.GLOBAL_INLINE_SCRIPTS)
    _drop_unclaimed_callbacks()


def auth_visible(text: str | None) -> tuple[dict[str, str], ...]:
    """The token box's parts hidden on a server without tokens (the default): there it is clutter."""
    hidden: dict[str, str] = {"display": "none"}
    return (hidden,) * 4 if text == auth_box.describe({"auth": "off"}) or not text else ({},) * 4


def _clientside(
    app: dash.Dash, function: ClientsideFunction, *deps: Output | Input | State, **options: bool | str
) -> None:
    """`app.clientside_callback(function, *deps, **options)`."""
    app.clientside_callback(function, *deps, **options)  # type: ignore[no-untyped-call]  # unannotated in Dash


def _register_shell(app: dash.Dash) -> None:
    app.callback(
        *[
            Output(i, "style")
            for i in (auth_box.TOKEN_INPUT, auth_box.TOKEN_SAVE, auth_box.TOKEN_FORGET, auth_box.WHOAMI)
        ],
        Input(auth_box.WHOAMI, "children"),
    )(auth_visible)
    _clientside(
        app,
        ClientsideFunction("normlab", "watch"),
        Output(ids.WATCH_SINK, "children"),
        Output(ids.TICK, "disabled", allow_duplicate=True),
        Input(ids.WATCH, "data"),
        prevent_initial_call="initial_duplicate",
    )
    _clientside(
        app,
        ClientsideFunction("normlab", "curvesMap"),
        Output(ids.CURVES_SINK, "children"),
        Input(ids.CURVES_MAP, "data"),
    )
    _clientside(
        app,
        ClientsideFunction("normlab", "status"),
        Output(ids.LIVE_STATUS, "data"),
        Output(ids.TICK, "disabled", allow_duplicate=True),
        Input(ids.TICK, "n_intervals"),
        prevent_initial_call=True,
    )
    _clientside(
        app,
        ClientsideFunction("normlab", "urlState"),
        Output(ids.URL_SINK, "children"),
        Input(ids.URL_STATE, "data"),
    )
    _clientside(
        app,
        ClientsideFunction("normlab", "copyLink"),
        Output(ids.COPY_DONE, "children"),
        Input(ids.COPY_LINK, "n_clicks"),
        prevent_initial_call=True,
    )
    _clientside(
        app,
        ClientsideFunction("normlab_embed", "copy"),
        Output(ids.EMBED_DONE, "children"),
        Input(ids.EMBED, "n_clicks"),
        prevent_initial_call=True,
    )
    _clientside(
        app, ClientsideFunction("normlab", "present"), Output(ids.PRESENT, "data"), Input(ids.URL, "search")
    )
    _clientside(
        app,
        ClientsideFunction("normlab", "togglePresent"),
        Output(ids.PRESENT_TOGGLE, "title"),
        Input(ids.PRESENT_TOGGLE, "n_clicks"),
        prevent_initial_call=True,
    )
