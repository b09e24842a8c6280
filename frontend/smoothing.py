"""Curve smoothing and hover, shared by every curves panel (Lab, Run, Compare).

One definition of the smoothing: TensorBoard's debiased exponential moving average, `ema` here for the
history the server draws and `normlab.emaStep` in assets/normlab.js for the live points, which continues
from the (accumulator, count) state the trace map hands over, so the two join without a seam. The raw
series is drawn faint underneath the smoothed one; the hover of a point says run, step, value (and the
raw value when smoothed) and the wall time since the run started, formatted like `format_elapsed`
(`normlab.formatElapsed` in the browser).

The weight applies to the dense series only, the training loss recorded every step, where a small
batch makes the raw curve a band; the validation curves are sparse evaluations (a handful of points),
where an EMA would drag each point towards the start of training, so they are always drawn raw
(`SMOOTHED_PANELS`). Lab and Run share one browser-wide smoothing setting (a cookie the server reads
when it renders them, DEFAULT_WEIGHT until the browser picks one) and also carry it in their URL, so a
copied link opens the same view; Compare keeps its own in the URL. The slider and its callback are in
frontend/smoothing_control.py.
"""

from __future__ import annotations

import math

from normlab_client.palette import RAW_OPACITY, ema  # noqa: F401  (one definition, shared with the client)

COOKIE = "normlab_smooth"  # Lab and Run: the smoothing weight this browser chose last
DEFAULT_WEIGHT = 0.6  # dense training-loss curves open readable; the raw series stays faint underneath
SMOOTHED_PANELS = ("loss",)  # the per-step training loss; validation panels are sparse: drawn raw


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


def parse_weight(value: str | float | None) -> float:
    """A smoothing weight from a cookie or a control: a number in [0, 0.99], else 0 (raw curves)."""
    if value is None:
        return 0.0
    try:
        v = float(value)
    except (TypeError, ValueError):  # what a cookie or a stored state holds is not checked beforehand
        return 0.0
    return min(max(v, 0.0), 0.99) if math.isfinite(v) else 0.0


def cookie_weight() -> float:
    """The browser's smoothing setting for Lab and Run (DEFAULT_WEIGHT outside a request or when never
    set)."""
    import flask

    raw = flask.request.cookies.get(COOKIE) if flask.has_request_context() else None
    return DEFAULT_WEIGHT if raw is None else parse_weight(raw)


def hovertemplate(series_label: str, smoothed: bool) -> str:
    """Run, step, value (and raw value when smoothed), wall time: customdata = [step, wall, raw]."""
    raw = " (raw %{customdata[2]:.4g})" if smoothed else ""
    return (
        "<b>%{fullData.name}</b><br>step %{customdata[0]}<br>"
        + series_label
        + " %{y:.4g}"
        + raw
        + "<br>wall time %{customdata[1]}<extra></extra>"
    )
