"""Curve smoothing and hover, shared by every curves panel (Lab, Run, Compare).

One definition of the smoothing: TensorBoard's debiased exponential moving average, `ema` here for the
history the server draws and `normlab.emaStep` in assets/normlab.js for the live points, which continues
from the (accumulator, count) state the trace map hands over, so the two join without a seam. The raw
series is drawn faint underneath the smoothed one; the hover of a point says run, step, value (and the
raw value when smoothed) and the wall time since the run started, formatted like `format_elapsed`
(`normlab.formatElapsed` in the browser).

Lab and Run share one browser-wide smoothing setting (a cookie the server reads when it renders them);
Compare keeps its own in the URL. `register(control_id)` is called by a page module at import time, so
each app Dash builds (Dash re-imports the pages) gets the callback once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dash import Input, Output, State, callback, ctx, dcc, html, no_update

from frontend import ids

COOKIE = "normlab_smooth"  # Lab and Run: the smoothing weight this browser chose last
RAW_OPACITY = 0.28  # the raw series under a smoothed curve: visible, but clearly behind it


def ema(values: Iterable[float | None], weight: float, state: tuple[float, int] = (0.0, 0)):
    """Debiased exponential moving average (TensorBoard's): (smoothed list, (accumulator, n)).

    acc_k = w·acc_{k-1} + (1 − w)·v_k over the finite values (acc_0 = 0, w = weight), and the k-th output
    is acc_k / (1 − w^k); missing and non-finite values pass through and do not count. Passing the
    returned state back continues the average exactly where it stopped (how the browser extends a
    smoothed history with live points).
    """
    acc, n = state
    out: list[float | None] = []
    for v in values:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            out.append(v)
            continue
        acc = acc * weight + (1.0 - weight) * v
        n += 1
        debias = 1.0 - weight ** n
        out.append(acc / debias if debias > 0 else v)
    return out, (acc, n)


def format_elapsed(seconds: float | None) -> str:
    """Wall time since the run started, for a hover: '0.84 s', '12.3 s', '2 min 05 s', '1 h 02 min'."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = math.floor(seconds + 0.5)  # half up, as the browser's Math.round
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def parse_weight(value) -> float:
    """A smoothing weight from a cookie or a control: a number in [0, 0.99], else 0 (raw curves)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(max(v, 0.0), 0.99) if math.isfinite(v) else 0.0


def cookie_weight() -> float:
    """The browser's smoothing setting for Lab and Run (0 outside a request or when never set)."""
    import flask

    return parse_weight(flask.request.cookies.get(COOKIE)) if flask.has_request_context() else 0.0


def hovertemplate(series_label: str, smoothed: bool) -> str:
    """Run, step, value (and raw value when smoothed), wall time: customdata = [step, wall, raw]."""
    raw = " (raw %{customdata[2]:.4g})" if smoothed else ""
    return ("<b>%{fullData.name}</b><br>step %{customdata[0]}<br>" + series_label + " %{y:.4g}" + raw
            + "<br>wall time %{customdata[1]}<extra></extra>")


def control(control_id: str, value: float) -> html.Div:
    """The smoothing slider of a curves card (0 = raw curves only)."""
    return html.Div(className="field smoothing", children=[
        html.Label("Smoothing (EMA)", className="label", htmlFor=control_id),
        dcc.Slider(id=control_id, min=0, max=0.99, step=0.01, value=value,
                   marks={0: "0", 0.6: "0.6", 0.9: "0.9", 0.99: "0.99"},
                   tooltip={"placement": "bottom", "always_visible": False}),
    ])


def rebuild(weight, trace_map, present):
    """(figure, trace map, watch) of the runs the curves graph shows, smoothed with `weight`; the
    browser keeps the setting in a cookie so the next page it opens renders smoothed the same way."""
    from frontend import data  # data imports figures, which imports this module

    weight = parse_weight(weight)
    remember(weight)
    trace_map = trace_map or {}
    if not trace_map.get("runs") or parse_weight(trace_map.get("smooth")) == weight:
        return no_update, no_update, no_update
    bundle = data.curves_bundle(list(trace_map["runs"]), smoothing=weight, x_mode=trace_map.get("x", "step"),
                                color_by=trace_map.get("color", "norm"), panels=trace_map.get("panels"),
                                present=bool(present), from_start=bool(trace_map.get("from_start")))
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
    callback(Output(ids.CURVES, "figure", allow_duplicate=True),
             Output(ids.CURVES_MAP, "data", allow_duplicate=True),
             Output(ids.WATCH, "data", allow_duplicate=True),
             Input(control_id, "value"), State(ids.CURVES_MAP, "data"), State(ids.PRESENT, "data"),
             prevent_initial_call=True)(rebuild)
