"""The Lab's live extras beside the curves: the queued runs' places in the queue (refreshed while any
waits) and the compact probe strip of the newest run with probes. `register()` is called by the Lab page
at import time, so each app Dash builds gets these callbacks once (as frontend/smoothing_control.py)."""

from __future__ import annotations

from typing import Any

from dash import ClientsideFunction, Input, Output, State, callback, clientside_callback, dcc, html, no_update

from frontend import components, data, ids, probe_strip
from frontend.api_client import ApiError


def any_queued(runs: list[dict[str, Any]]) -> bool:
    return any(r.get("status") == "queued" for r in runs)


def probe_strip_box(runs: list[dict[str, Any]], present: bool) -> html.Div:
    """The compact probe strip of the newest board run with probes (hidden while none has them)."""
    newest = probe_strip.newest_probe_run(runs)
    return html.Div(
        id=ids.LAB_STRIP,
        className="probe-strip",
        style={} if newest else {"display": "none"},
        children=[
            html.H3("Probes of the newest run"),
            html.P(probe_strip.HELP, className="panel-help"),
            dcc.Graph(
                id=ids.LAB_STRIP_GRAPH,
                figure=probe_strip.strip_figure([], [], present),
                config=components.GRAPH_CONFIG,
                className="graph",
            ),
            dcc.Store(id=ids.LAB_STRIP_RUN, data=newest),
            dcc.Store(id=ids.LAB_STRIP_PROBES),
        ],
    )


def register() -> None:
    callback(
        Output(ids.LAB_RUNS_DATA, "data", allow_duplicate=True),
        Output(ids.LAB_QUEUE_POLL, "disabled", allow_duplicate=True),
        Input(ids.LAB_QUEUE_POLL, "n_intervals"),
        State(ids.LAB_RUNS_DATA, "data"),
        prevent_initial_call=True,
    )(on_queue_poll)
    # the strip's run's probe snapshots, from this tab's stream (assets/normlab.js), at most once a second
    clientside_callback(
        ClientsideFunction("normlab", "probes"),
        Output(ids.LAB_STRIP_PROBES, "data"),
        Input(ids.TICK, "n_intervals"),
        State(ids.LAB_STRIP_RUN, "data"),
        prevent_initial_call=True,
    )
    callback(
        Output(ids.LAB_STRIP_GRAPH, "figure"),
        Input(ids.LAB_STRIP_PROBES, "data"),
        State(ids.PRESENT, "data"),
        prevent_initial_call=True,
    )(on_strip)


def on_queue_poll(_n: int | None, runs: list[dict[str, Any]] | None) -> tuple[object, object]:
    """The board's queued runs read again: their queue positions move as others finish or overtake."""
    runs = runs or []
    waiting = [r["id"] for r in runs if r.get("status") == "queued"]
    if not waiting:
        return no_update, True
    try:
        fresh, _ = data.fetch_runs(data.api(), waiting)
    except ApiError:
        return no_update, no_update
    by_id = {r["id"]: r for r in fresh}
    runs = [by_id.get(r["id"], r) for r in runs]
    return runs, not any_queued(runs)


def on_strip(probes: dict[str, Any] | None, present: bool | None) -> dict[str, Any]:
    probes = probes or {}
    return probe_strip.strip_figure(probes.get("hidden", []), probes.get("fisher", []), bool(present))
