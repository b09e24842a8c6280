"""A self-contained token box for a shared lab server: paste an API token once (kept in the browser's
localStorage), see who it identifies. Place `auth_box()` in the layout and call `register(app)`.

Other callbacks read the token as `State(TOKEN_STORE, "data")` and pass `auth_headers(token)` with their
API calls; EventSource URLs take `?token=` when the server's reading is private (see /api/me).
With NORMLAB_AUTH=off the box says so and nothing asks for a token.
"""

from __future__ import annotations

from typing import Any

import flask
import httpx
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

TOKEN_STORE = "auth-token"  # dcc.Store (localStorage): the token, or None
# The browser also keeps a copy as a same-site cookie: the dashboard's server renders pages (and
# runs callbacks) for that browser, and reads a private server's API with it.
TOKEN_COOKIE = "normlab_token"
TOKEN_COOKIE_SYNC = "auth-token-cookie-sync"
TOKEN_INPUT = "auth-token-input"
TOKEN_SAVE = "auth-token-save"
TOKEN_FORGET = "auth-token-forget"
WHOAMI = "auth-whoami"


def auth_headers(token: str | None) -> dict[str, str]:
    """Headers for an API call on behalf of the browser's user (none without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def auth_box() -> html.Div:
    return html.Div(
        className="auth-box",
        children=[
            dcc.Store(id=TOKEN_STORE, storage_type="local"),
            dcc.Store(id=TOKEN_COOKIE_SYNC),
            dcc.Input(
                id=TOKEN_INPUT,
                type="password",
                placeholder="API token",
                debounce=True,
                className="auth-input",
                autoComplete="off",
            ),
            html.Button("Use token", id=TOKEN_SAVE, className="btn small"),
            html.Button("Forget", id=TOKEN_FORGET, className="btn small"),
            html.Span(id=WHOAMI, className="auth-who", role="status"),
        ],
    )


def describe(me: dict[str, Any] | None, error: str | None = None) -> str:
    """What the box shows, from GET /api/me (or an error message)."""
    if error:
        return error
    if not me:
        return ""
    if me.get("auth") == "off":
        return "This server needs no token."
    if me.get("user"):
        role = " (admin)" if me.get("admin") else ""
        return f"Signed in as {me['user']}{role}."
    return "Not signed in: paste an API token to submit runs." + (
        "" if me.get("public_read", True) else " Reading this server needs one too."
    )


def whoami(
    api_base: str, token: str | None, http: httpx.Client | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """(GET /api/me as JSON, None) or (None, a message saying what is wrong)."""
    if http is None:
        from frontend.api_client import api_for

        http = httpx.Client(base_url=api_for(api_base).base, timeout=5)
    try:
        r = http.get("/api/me", headers=auth_headers(token))
    except httpx.HTTPError as exc:
        return None, f"The API did not answer ({exc.__class__.__name__})."
    if r.status_code == 401:
        return None, "That token is unknown or revoked; ask the server's admin for a new one."
    if r.status_code != 200:
        return None, f"The API answered {r.status_code}."
    return r.json(), None


def save(
    _save: int | None, _submit: int | None, _forget: int | None, value: str | None
) -> tuple[str | None, str]:
    """The token to keep (None when forgotten); the input is cleared so the token stays out of sight."""
    if ctx.triggered_id == TOKEN_FORGET:
        return None, ""
    return ((value or "").strip() or None), ""


def show(token: str | None) -> object:  # the text, or no_update
    """Who the stored token identifies, asked of the API this dashboard talks to."""
    base = flask.current_app.config.get("NORMLAB_API_BASE", "") if flask.has_app_context() else ""
    me, error = whoami(base, token)
    return describe(me, error) if (me or error) else no_update


# Keep the cookie copy equal to the stored token; when it changes (a token pasted or forgotten), reload
# so every panel is fetched again as the new user.
SYNC_COOKIE_JS = f"""function (token) {{
    var name = "{TOKEN_COOKIE}";
    var had = document.cookie.split("; ")
        .find(function (c) {{ return c.indexOf(name + "=") === 0; }}) || "";
    had = had.slice(name.length + 1);
    var now = token ? encodeURIComponent(token) : "";
    if (had === now) {{ return window.dash_clientside.no_update; }}
    document.cookie = name + "=" + now + "; path=/; SameSite=Strict" + (now ? "" : "; max-age=0");
    // once per value: a browser that refuses cookies must not reload forever
    if (window.sessionStorage.getItem("normlab-token-reloaded") === now) {{
        return window.dash_clientside.no_update;
    }}
    window.sessionStorage.setItem("normlab-token-reloaded", now);
    window.location.reload();
    return window.dash_clientside.no_update;
}}"""


def register(app: Dash) -> None:
    """Put the box's callbacks on `app` (the shell is app-wide, not a page: registered per app)."""
    app.callback(
        Output(TOKEN_STORE, "data"),
        Output(TOKEN_INPUT, "value"),
        Input(TOKEN_SAVE, "n_clicks"),
        Input(TOKEN_INPUT, "n_submit"),
        Input(TOKEN_FORGET, "n_clicks"),
        State(TOKEN_INPUT, "value"),
        prevent_initial_call=True,
    )(save)
    # dash's clientside_callback is unannotated
    app.clientside_callback(  # type: ignore[no-untyped-call]
        SYNC_COOKIE_JS, Output(TOKEN_COOKIE_SYNC, "data"), Input(TOKEN_STORE, "data")
    )
    app.callback(Output(WHOAMI, "children"), Input(TOKEN_STORE, "data"))(show)
