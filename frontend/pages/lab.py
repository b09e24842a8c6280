"""Lab: the run builder (options and limits from /api/catalog, the API's messages next to each field), a
sweep mode (normalizers × batch sizes × seeds), the probe settings, and the live board of the runs
started here.

The Lab survives navigation and reloads: its URL holds the board (runs=…) and every field that differs
from the task's default, and the browser keeps the last Lab query in a cookie, so a bare "/" (the nav's
Lab link, the brand, a reload of "/") is rendered on the server straight from it — no empty flash.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import dash
import flask
from dash import (
    ALL,
    ClientsideFunction,
    Input,
    Output,
    State,
    callback,
    clientside_callback,
    ctx,
    dcc,
    html,
    no_update,
)

from frontend import (
    components,
    data,
    fork_view,
    ids,
    lab_builder,
    lab_form,
    lab_live,
    logic,
    probe_strip,
    smoothing_control,
)
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE
from frontend.lab_builder import FIELD_NAMES, task_changed
from frontend.lab_submit import submit
from normlab_client.catalog import TASKS

MAX_LIVE = 24
LAB_COOKIE = "normlab_lab"  # the last Lab query (written by the clientside callback at the end)
STATE_KEYS = {
    "runs",
    "group",
    "task",
    "norm",
    "sweep",
    "sweep_norms",
    "sweep_batch",
    "sweep_seeds",
    *lab_form.KINDS,
}


def remembered_query() -> dict[str, str]:
    """The last Lab query this browser showed (its cookie), {} outside a request or without one."""
    if not flask.has_request_context():
        return {}
    return logic.decode_query(unquote(flask.request.cookies.get(LAB_COOKIE) or ""))  # set encoded


def layout(**query: str) -> html.Div:
    present_on = logic.is_present(query)
    if not STATE_KEYS & set(query):  # a bare "/": the Lab as this browser left it
        query = {**remembered_query(), **query}
    elif "runs" not in query:  # a link to a form ("run it again with …") keeps this browser's board
        query = {**query, "runs": remembered_query().get("runs", "")}
    try:
        catalog = data.api().catalog()
    except ApiError as exc:
        return html.Div([components.error_box(exc.detail), *components.page_stores()])
    tasks = {t["name"]: t for t in catalog["tasks"]}
    task = str(query["task"]) if query.get("task") in tasks else "digits"
    limits = lab_form.field_limits(catalog.get("fields", {}))
    values = lab_form.form_from_query(task, query)
    run_ids = logic.split_list(query.get("runs"))[-MAX_LIVE:]
    bundle = data.curves_bundle(run_ids, present=present_on)
    builder = lab_builder.builder(catalog, task, query, values, limits)
    live = components.card(
        "Live",
        className="live",
        children=[
            html.Div(
                id=ids.LAB_RUNS,
                className="run-list",
                children=components.run_chips(bundle["runs"]) or EMPTY_BOARD,
            ),
            html.Div(
                className="board-actions",
                children=[
                    dcc.Link(
                        "Compare these runs →",
                        id=ids.LAB_COMPARE_LINK,
                        className="compare-link",
                        href=compare_href(run_ids, query.get("group") or None),
                        style={} if run_ids else {"display": "none"},
                    ),
                    html.Button(
                        "Clear the board",
                        id=ids.LAB_CLEAR,
                        className="btn small controls",
                        title="Take every run off this card (the runs themselves stay on the Runs page)",
                    ),
                ],
            ),
            smoothing_control.control(ids.LAB_SMOOTH, bundle["map"].get("smooth", 0.0)),
            *components.curves_graph(bundle["figure"], bundle["map"]),
            lab_live.probe_strip_box(bundle["runs"], present_on),
            html.Details(
                className="what-if controls",
                children=[
                    html.Summary("What if… fork a run, or change a running one now"),
                    html.Div(
                        className="what-if-cards",
                        children=[fork_view.fork_card(None), fork_view.change_card(None)],
                    ),
                ],
            ),
        ],
    )
    defaults = {
        "names": FIELD_NAMES,
        "probe_names": lab_form.PROBE_NAMES,
        "tasks": {name: lab_form.field_defaults(name) for name in TASKS},
    }
    return html.Div(
        className="lab-page",
        children=[
            builder,
            live,
            dcc.Store(id=ids.LAB_RUNS_DATA, data=bundle["runs"]),
            # while a run on the board waits, its place in the queue is refreshed (the chips show it)
            dcc.Interval(
                id=ids.LAB_QUEUE_POLL, interval=3000, disabled=not lab_live.any_queued(bundle["runs"])
            ),
            dcc.Store(id=ids.LAB_BOARD, data={"runs": run_ids, "group": query.get("group") or None}),
            dcc.Store(id=ids.LAB_FORM_DEFAULTS, data=defaults),
            dcc.Store(id=ids.LAB_LIMITS, data=limits),
            *components.page_stores(bundle["watch"], {"runs": run_ids, "task": task}),
        ],
    )


EMPTY_BOARD = html.P("Runs you start appear here and stream live.", className="muted")

smoothing_control.register(ids.LAB_SMOOTH)  # the smoothing slider redraws the curves
lab_live.register()  # queue positions of waiting runs, the probe strip


# prevent_initial_call: the layout already shows the task's options and the form (from the URL); a
# first call here would put the defaults back over the restored form.
@callback(
    Output(ids.LAB_NORM, "options"),
    Output(ids.LAB_NORM, "value"),
    Output(ids.LAB_SWEEP_NORMS, "options"),
    Output({"type": ids.LAB_FIELD, "field": ALL}, "value"),
    Output({"type": "lab-box", "field": ALL}, "style"),
    Output(ids.LAB_TASK_HELP, "children"),
    Input(ids.LAB_TASK, "value"),
    State(ids.LAB_NORM, "value"),
    State({"type": ids.LAB_FIELD, "field": ALL}, "value"),
    prevent_initial_call=True,
)
def on_task(
    task: str, norm: str | None, current: list[Any]
) -> tuple[list[dict[str, Any]], str | None, list[dict[str, Any]], list[Any], list[dict[str, str]], str]:
    tasks = {t["name"]: t for t in data.api().catalog()["tasks"]}
    norm_options, norm_value, sweep_options, values, boxes, task_help = task_changed(task, tasks, norm)
    probes_at = FIELD_NAMES.index("probes")  # probes stay as they were: a new task is no reason to drop them
    values = [current[probes_at] if i == probes_at else v for i, v in enumerate(values)]
    # the boxes (ALL, in layout order) end with the probe settings': those follow the probes switch
    boxes = [*boxes, *({} for _ in lab_form.PROBE_NAMES)]
    return norm_options, norm_value, sweep_options, values, boxes, task_help


@callback(
    Output(ids.LAB_SWEEP_BOX, "style"),
    Output(ids.LAB_SINGLE_NORM_BOX, "style"),
    Output(ids.LAB_SUBMIT, "children"),
    Input(ids.LAB_SWEEP, "value"),
    prevent_initial_call=True,
)
def on_sweep_toggle(sweep: list[str] | None) -> tuple[dict[str, str], dict[str, str], str]:
    on = bool(sweep)
    return (
        {} if on else {"display": "none"},
        {"display": "none"} if on else {},
        "Start sweep" if on else "Start run",
    )


@callback(
    Output(ids.LAB_PROBE_BOX, "style"),
    Input({"type": ids.LAB_FIELD, "field": "probes"}, "value"),
    prevent_initial_call=True,
)
def on_probes_toggle(probes: list[str] | None) -> dict[str, str]:
    return {} if probes else {"display": "none"}


def _wildcard_values() -> dict[str, Any]:
    """{field: value} of every pattern-matching State of the running callback (form and probe fields)."""
    out: dict[str, Any] = {}
    for states in ctx.states_list:
        if isinstance(states, list):
            out.update({s["id"]["field"]: s.get("value") for s in states})
    return out


BOARD_OUTPUTS = [
    Output(ids.LAB_BOARD, "data", allow_duplicate=True),
    Output(ids.WATCH, "data", allow_duplicate=True),
    Output(ids.CURVES, "figure", allow_duplicate=True),
    Output(ids.CURVES_MAP, "data", allow_duplicate=True),
    Output(ids.LAB_RUNS_DATA, "data", allow_duplicate=True),
    Output(ids.LAB_COMPARE_LINK, "href", allow_duplicate=True),
    Output(ids.LAB_COMPARE_LINK, "style", allow_duplicate=True),
    Output(ids.LAB_QUEUE_POLL, "disabled", allow_duplicate=True),
    Output(ids.LAB_STRIP_RUN, "data", allow_duplicate=True),
    Output(ids.LAB_STRIP, "style", allow_duplicate=True),
]


def compare_href(run_ids: list[str], group: str | None) -> str:
    """Compare for the board's runs, with the last sweep's group (its results table and bands)."""
    return "/compare" + logic.encode_query({"runs": run_ids, "group": group})


def board(run_ids: list[str], present: bool, group: str | None = None) -> tuple[object, ...]:
    """The Live card for these runs: board store, watch, figure, trace map, runs, compare link."""
    bundle = data.curves_bundle(run_ids, present=present)
    return (
        {"runs": run_ids, "group": group},
        bundle["watch"],
        bundle["figure"],
        bundle["map"],
        bundle["runs"],
        compare_href(run_ids, group),
        {} if run_ids else {"display": "none"},
        not lab_live.any_queued(bundle["runs"]),
        probe_strip.newest_probe_run(bundle["runs"]),
        {} if probe_strip.newest_probe_run(bundle["runs"]) else {"display": "none"},
    )


@callback(
    Output({"type": ids.LAB_ERROR, "field": ALL}, "children"),
    Output(ids.LAB_MESSAGE, "children"),
    Output(ids.LAB_MESSAGE, "className"),
    *BOARD_OUTPUTS,
    Input(ids.LAB_SUBMIT, "n_clicks"),
    State(ids.LAB_TASK, "value"),
    State(ids.LAB_NORM, "value"),
    State(ids.LAB_SWEEP, "value"),
    State(ids.LAB_SWEEP_NORMS, "value"),
    State(ids.LAB_SWEEP_BATCH, "value"),
    State(ids.LAB_SWEEP_SEEDS, "value"),
    State({"type": ids.LAB_FIELD, "field": ALL}, "value"),
    State({"type": ids.LAB_PROBE_FIELD, "field": ALL}, "value"),
    State(ids.LAB_LIMITS, "data"),
    State(ids.LAB_BOARD, "data"),
    State(ids.PRESENT, "data"),
    State(TOKEN_STORE, "data"),
    prevent_initial_call=True,
)
def on_submit(
    _n: int | None,
    task: str,
    norm: str,
    sweep: list[str] | None,
    sweep_norms: list[str] | None,
    sweep_batch: str | None,
    sweep_seeds: str | None,
    _values: list[Any],
    _probe_values: list[Any],
    limits: dict[str, Any] | None,
    board_state: dict[str, Any] | None,
    present: bool | None,
    token: str | None,
) -> tuple[object, ...]:
    error_ids = [o["id"]["field"] for o in ctx.outputs_list[0]]
    result = submit(
        task, norm, bool(sweep), sweep_norms, sweep_batch, sweep_seeds, _wildcard_values(), token, limits
    )
    errors = [result["errors"].get(f, "") for f in error_ids]
    if not result["run_ids"]:
        return (errors, result["message"], "message error", *([no_update] * len(BOARD_OUTPUTS)))
    previous = logic.split_list((board_state or {}).get("runs"))
    run_ids = [r for r in previous if r not in result["run_ids"]] + result["run_ids"]
    group = result.get("group") or (board_state or {}).get("group")
    cls = "message ok" if not str(result["message"]).startswith("Queued") else "message queued"
    return (errors, result["message"], cls, *board(run_ids[-MAX_LIVE:], bool(present), group))


@callback(
    *BOARD_OUTPUTS,
    Input(ids.FORK_CHILD, "data"),
    State(ids.LAB_BOARD, "data"),
    State(ids.PRESENT, "data"),
    prevent_initial_call=True,
)
def on_forked(
    child: str | None, board_state: dict[str, Any] | None, present: bool | None
) -> tuple[object, ...]:
    """A fork made from the live card joins the board, drawn beside its parent (dashed past the fork)."""
    if not child:
        return (no_update,) * len(BOARD_OUTPUTS)
    previous = logic.split_list((board_state or {}).get("runs"))
    run_ids = [r for r in previous if r != child] + [child]
    return board(run_ids[-MAX_LIVE:], bool(present), (board_state or {}).get("group"))


@callback(
    *BOARD_OUTPUTS, Input(ids.LAB_CLEAR, "n_clicks"), State(ids.PRESENT, "data"), prevent_initial_call=True
)
def on_clear(_n: int | None, present: bool | None) -> tuple[object, ...]:
    return board([], bool(present))


@callback(
    Output(ids.LAB_RUNS, "children"),
    Input(ids.LAB_RUNS_DATA, "data"),
    Input(ids.LIVE_STATUS, "data"),
    prevent_initial_call=True,
)
def on_runs(runs: list[dict[str, Any]] | None, live: dict[str, str] | None) -> html.P | list[html.Div]:
    if not runs:
        return EMPTY_BOARD
    return components.run_chips(runs, "norm", live)


# The Lab's state → the URL (the shell mirrors URL_STATE into the query) and the cookie a bare "/" is
# rebuilt from (assets/lab.js). In the browser, at once on every change: no round trip, nothing to race.
clientside_callback(
    ClientsideFunction("normlab_lab", "state"),
    Output(ids.URL_STATE, "data", allow_duplicate=True),
    Input(ids.LAB_BOARD, "data"),
    Input(ids.LAB_TASK, "value"),
    Input(ids.LAB_NORM, "value"),
    Input(ids.LAB_SWEEP, "value"),
    Input(ids.LAB_SWEEP_NORMS, "value"),
    Input(ids.LAB_SWEEP_BATCH, "value"),
    Input(ids.LAB_SWEEP_SEEDS, "value"),
    Input({"type": ids.LAB_FIELD, "field": ALL}, "value"),
    Input({"type": ids.LAB_PROBE_FIELD, "field": ALL}, "value"),
    State(ids.LAB_FORM_DEFAULTS, "data"),
    prevent_initial_call="initial_duplicate",
)


dash.register_page(  # type: ignore[no-untyped-call]  # dash's register_page is unannotated
    __name__, path="/", name="Lab", title="normlab · Lab", order=0
)
