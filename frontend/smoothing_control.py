"""The smoothing slider of the Lab's and the Run page's curves, and the callback that redraws them.

`register(control_id)` is called by a page module at import time, so each app Dash builds (Dash
re-imports the pages) gets the callback once. The smoothing itself is frontend/smoothing.py.
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, callback, ctx, dcc, html, no_update

from frontend import data, ids
from frontend.smoothing import COOKIE, parse_weight


def control(control_id: str, value: float) -> html.Div:
    """The smoothing slider of a curves card (0 = raw curves only)."""
    return html.Div(
        className="field smoothing",
        children=[
            html.Label("Smoothing (EMA)", className="label", htmlFor=control_id),
            dcc.Slider(
                id=control_id,
                min=0,
                max=0.99,
                step=0.01,
                value=value,
                marks={0: "0", 0.6: "0.6", 0.9: "0.9", 0.99: "0.99"},
                tooltip={"placement": "bottom", "always_visible": False},
            ),
        ],
    )


def rebuild(
    weight: float | str | None, trace_map: dict[str, Any] | None, present: bool | None
) -> tuple[object, object, object]:
    """(figure, trace map, watch) of the runs the curves graph shows, smoothed with `weight`; the
    browser keeps the setting in a cookie so the next page it opens renders smoothed the same way."""
    weight = parse_weight(weight)
    remember(weight)
    trace_map = trace_map or {}
    if not trace_map.get("runs") or parse_weight(trace_map.get("smooth")) == weight:
        return no_update, no_update, no_update
    bundle = data.curves_bundle(
        list(trace_map["runs"]),
        smoothing=weight,
        x_mode=trace_map.get("x", "step"),
        color_by=trace_map.get("color", "norm"),
        panels=trace_map.get("panels"),
        present=bool(present),
        from_start=bool(trace_map.get("from_start")),
    )
    return bundle["figure"], bundle["map"], bundle["watch"]


def remember(weight: float) -> None:
    """Set the smoothing cookie on the callback's response (nothing outside a callback: unit tests)."""
    from dash.exceptions import MissingCallbackContextException

    try:
        response = ctx.response
    except MissingCallbackContextException:
        return
    response.set_cookie(COOKIE, f"{weight:g}", max_age=365 * 24 * 3600, samesite="Lax")


def register(control_id: str) -> None:
    """The callback that redraws a page's curves when its smoothing control moves (Lab, Run)."""
    callback(
        Output(ids.CURVES, "figure", allow_duplicate=True),
        Output(ids.CURVES_MAP, "data", allow_duplicate=True),
        Output(ids.WATCH, "data", allow_duplicate=True),
        Input(control_id, "value"),
        State(ids.CURVES_MAP, "data"),
        State(ids.PRESENT, "data"),
        prevent_initial_call=True,
    )(rebuild)
