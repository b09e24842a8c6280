"""The Lab's live extras beside the curves: the queued runs' places in the queue (refreshed while any
waits, and the message about a queued run following it until it starts) and the compact probe strip of
the newest run with probes. `register()` is called by the Lab page at import time, so each app Dash
builds gets these callbacks once (as frontend/smoothing_control.py)."""

from __future__ import annotations

import re
from typing import Any

from dash import ClientsideFunction, Input, Output, State, callback, clientside_callback, dcc, html, no_update

from frontend import components, data, ids, probe_strip
from frontend.api_client import ApiError

QUEUED_MESSAGE = re.compile(r"^Queued run ([A-Za-z0-9_-]+): ")  # frontend/lab_submit.started_message


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
        Output(ids.LAB_MESSAGE, "children", allow_duplicate=True),
        Output(ids.LAB_MESSAGE, "className", allow_duplicate=True),
        Input(ids.LIVE_STATUS, "data"),
        Input(ids.LAB_RUNS_DATA, "data"),
        State(ids.LAB_MESSAGE, "children"),
        prevent_initial_call=True,
    )(on_queue_message)
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


def on_queue_message(
    live: dict[str, str] | None, runs: list[dict[str, Any]] | None, message: Any
) -> tuple[object, object]:
    """The message about a queued run follows it: its place in the queue as it moves, then 'Run X
    started.' (or how it ended) once it is no longer queued; any other message is left as it is."""
    found = QUEUED_MESSAGE.match(message) if isinstance(message, str) else None
    if found is None:
        return no_update, no_update
    run_id = found.group(1)
    run = next((r for r in runs or [] if r.get("id") == run_id), None)
    status = (live or {}).get(run_id)
    if status in (None, "queued"):  # the stream has nothing newer than the board's data
        status = run.get("status") if run else None
    if status == "queued" and run is not None:
        note = components.queue_note(run)
        text = f"Queued run {run_id}: {note}." if note else message
        return (text, "message queued") if text != message else (no_update, no_update)
    if status is None or status == "queued":
        return no_update, no_update
    return (f"Run {run_id} started." if status == "running" else f"Run {run_id} {status}."), "message ok"


def on_strip(probes: dict[str, Any] | None, present: bool | None) -> dict[str, Any]:
    probes = probes or {}
    return probe_strip.strip_figure(probes.get("hidden", []), probes.get("fisher", []), bool(present))
