"""Lab: the run builder (options and limits from /api/catalog, the API's messages next to each field), a
sweep mode (normalizers × batch sizes × seeds), the probe settings, and the live board of the runs
started here.

The Lab survives navigation and reloads: its URL holds the board (runs=…) and every field that differs
from the task's default, and the browser keeps the last Lab query in a cookie, so a bare "/" (the nav's
Lab link, the brand, a reload of "/") is rendered on the server straight from it — no empty flash.
"""

from __future__ import annotations

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
from dash.development.base_component import Component

from frontend import components, data, ids, lab_form, logic, smoothing_control
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE
from normlab.catalog import NORMS, TASKS

FIELD_NAMES = [name for name, _, _ in lab_form.FORM_FIELDS]
CHOICES = {"optimizer": ["adam", "sgd"], "cell": ["lstm", "gru", "tanh"], "ln_placement": ["full", "cell"]}
MAX_LIVE = 24
LAB_COOKIE = "normlab_lab"  # the last Lab query (written by the clientside callback at the end)
STATE_KEYS = {"runs", "task", "norm", "sweep", "sweep_norms", "sweep_batch", "sweep_seeds", *lab_form.KINDS}


def _widget(fid: dict, name: str, kind: str, value, limits: dict) -> Component:
    if kind == "choice":
        return dcc.Dropdown(id=fid, options=CHOICES[name], value=value, clearable=name == "cell")
    if kind in ("flag", "bool"):
        return dcc.Checklist(
            id=fid, options=[{"label": lab_form.CHECK_TEXT[name], "value": "on"}], value=value or []
        )
    lim = limits.get(name, {})
    bounds = {k: lim[k] for k in ("min", "max") if lim.get(k) is not None}
    return dcc.Input(
        id=fid,
        type="number",
        value=value,
        debounce=True,
        className="input",
        required=True,
        step=1 if kind == "int" else "any",
        placeholder=lab_form.range_text(name, limits),
        **bounds,
    )


def _field(
    name: str, label: str, kind: str, value, limits: dict, hidden: bool = False, probe: bool = False
) -> html.Div:
    fid = {"type": ids.LAB_PROBE_FIELD if probe else ids.LAB_FIELD, "field": name}
    # presentation mode keeps a compact builder: task, normalizer, batch size, steps and Start
    cls = "field" if name in lab_form.COMPACT else "field controls"
    cls += " span-row" if kind == "bool" else ""
    title = lab_form.range_text(name, limits) if name in lab_form.NUMERIC else None  # this server's range
    return html.Div(
        id={"type": "lab-box", "field": name},
        className=cls,
        title=title,
        style={"display": "none"} if hidden else {},
        children=[
            html.Label(label, className="label"),
            _widget(fid, name, kind, value, limits),
            html.Div(id={"type": ids.LAB_ERROR, "field": name}, className="field-error", role="alert"),
        ],
    )


def remembered_query() -> dict[str, str]:
    """The last Lab query this browser showed (its cookie), {} outside a request or without one."""
    if not flask.has_request_context():
        return {}
    return logic.decode_query(unquote(flask.request.cookies.get(LAB_COOKIE) or ""))  # set encoded


def layout(**query) -> html.Div:
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
    norm_opts, norm, sweep_opts, _, styles, help_text = task_changed(task, tasks, query.get("norm"))
    sweep_on = query.get("sweep") == "1"
    sweep_norms = [n for n in logic.split_list(query.get("sweep_norms")) if n in tasks[task]["norms"]]
    run_ids = logic.split_list(query.get("runs"))[-MAX_LIVE:]
    bundle = data.curves_bundle(run_ids, present=present_on)
    task_opts = [
        {
            "label": f"{t['name']}" + ("" if t["available"] else " (unavailable)"),
            "value": t["name"],
            "disabled": not t["available"],
            "title": t.get("unavailable_reason") or t["description"],
        }
        for t in catalog["tasks"]
    ]
    probes_on = bool(values.get("probes"))
    builder = components.card(
        "Run builder",
        className="builder",
        children=[
            html.Div(
                className="field",
                children=[
                    html.Label("Task", className="label"),
                    dcc.Dropdown(id=ids.LAB_TASK, options=task_opts, value=task, clearable=False),
                    html.Div(id=ids.LAB_TASK_HELP, className="help", children=help_text),
                ],
            ),
            html.Div(
                id=ids.LAB_SINGLE_NORM_BOX,
                className="field",
                style={"display": "none"} if sweep_on else {},
                children=[
                    html.Label("Normalizer", className="label"),
                    dcc.Dropdown(id=ids.LAB_NORM, value=norm, clearable=False, options=norm_opts),
                    html.Div(
                        id={"type": ids.LAB_ERROR, "field": "norm"}, className="field-error", role="alert"
                    ),
                ],
            ),
            dcc.Checklist(
                id=ids.LAB_SWEEP,
                className="sweep-toggle controls",
                options=[{"label": " Sweep: several normalizers × batch sizes × seeds", "value": "on"}],
                value=["on"] if sweep_on else [],
            ),
            html.Div(
                id=ids.LAB_SWEEP_BOX,
                className="sweep-box controls",
                style={} if sweep_on else {"display": "none"},
                children=[
                    html.Label("Normalizers", className="label"),
                    dcc.Checklist(
                        id=ids.LAB_SWEEP_NORMS,
                        value=sweep_norms or ["batch", "layer"],
                        inline=True,
                        options=sweep_opts,
                    ),
                    html.Label("Batch sizes", className="label"),
                    dcc.Input(
                        id=ids.LAB_SWEEP_BATCH, value=query.get("sweep_batch") or "4, 128", className="input"
                    ),
                    html.Label("Seeds", className="label"),
                    dcc.Input(
                        id=ids.LAB_SWEEP_SEEDS, value=query.get("sweep_seeds") or "0", className="input"
                    ),
                ],
            ),
            html.Div(
                className="field-grid",
                children=[
                    _field(name, label, kind, values.get(name), limits, hidden=style == {"display": "none"})
                    for (name, label, kind), style in zip(lab_form.FORM_FIELDS, styles, strict=True)
                ],
            ),
            html.Div(
                id=ids.LAB_PROBE_BOX,
                className="probe-box field-grid controls",
                style={} if probes_on else {"display": "none"},
                children=[
                    _field(name, label, kind, values.get(name), limits, probe=True)
                    for name, label, kind in lab_form.PROBE_FIELDS
                ],
            ),
            html.Div(
                className="actions lab-actions",
                children=[
                    html.Button(
                        "Start sweep" if sweep_on else "Start run", id=ids.LAB_SUBMIT, className="btn primary"
                    ),
                    html.Div(id=ids.LAB_MESSAGE, className="message", role="status"),
                ],
            ),
        ],
    )
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
                        href="/compare" + logic.encode_query({"runs": run_ids}),
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
            dcc.Store(id=ids.LAB_BOARD, data={"runs": run_ids}),
            dcc.Store(id=ids.LAB_FORM_DEFAULTS, data=defaults),
            dcc.Store(id=ids.LAB_LIMITS, data=limits),
            *components.page_stores(bundle["watch"], {"runs": run_ids, "task": task}),
        ],
    )


EMPTY_BOARD = html.P("Runs you start appear here and stream live.", className="muted")

smoothing_control.register(ids.LAB_SMOOTH)  # the smoothing slider redraws the curves


def task_changed(task: str, catalog_tasks: dict, norm: str | None) -> tuple:
    """Outputs when the task changes: norm options and value, sweep options, field values, which
    fields show, help text. The chosen normalizer stays when the new task has it."""
    info = catalog_tasks[task]
    defaults = lab_form.field_defaults(task)
    sequential = info["kind"] == "sequence"
    values = [defaults.get(n) for n in FIELD_NAMES]
    styles = [
        {"display": "none"} if n in lab_form.SEQUENCE_ONLY and not sequential else {} for n in FIELD_NAMES
    ]
    norms = [{"label": n, "value": n, "title": NORMS.get(n, "")} for n in info["norms"]]
    keep = norm if norm in info["norms"] else ("layer" if "layer" in info["norms"] else info["norms"][0])
    return norms, keep, norms, values, styles, info["description"]


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
def on_task(task, norm, current):
    tasks = {t["name"]: t for t in data.api().catalog()["tasks"]}
    out = list(task_changed(task, tasks, norm))
    probes_at = FIELD_NAMES.index("probes")  # probes stay as they were: a new task is no reason to drop them
    out[3] = [current[probes_at] if i == probes_at else v for i, v in enumerate(out[3])]
    # the boxes (ALL, in layout order) end with the probe settings': those follow the probes switch
    out[4] = [*out[4], *({} for _ in lab_form.PROBE_NAMES)]
    return tuple(out)


@callback(
    Output(ids.LAB_SWEEP_BOX, "style"),
    Output(ids.LAB_SINGLE_NORM_BOX, "style"),
    Output(ids.LAB_SUBMIT, "children"),
    Input(ids.LAB_SWEEP, "value"),
    prevent_initial_call=True,
)
def on_sweep_toggle(sweep):
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
def on_probes_toggle(probes):
    return {} if probes else {"display": "none"}


def _wildcard_values() -> dict:
    """{field: value} of every pattern-matching State of the running callback (form and probe fields)."""
    out = {}
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
]


def board(run_ids: list[str], present: bool) -> tuple:
    """The Live card for these runs: board store, watch, figure, trace map, runs, compare link."""
    bundle = data.curves_bundle(run_ids, present=present)
    return (
        {"runs": run_ids},
        bundle["watch"],
        bundle["figure"],
        bundle["map"],
        bundle["runs"],
        "/compare" + logic.encode_query({"runs": run_ids}),
        {} if run_ids else {"display": "none"},
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
    _n,
    task,
    norm,
    sweep,
    sweep_norms,
    sweep_batch,
    sweep_seeds,
    _values,
    _probe_values,
    limits,
    board_state,
    present,
    token,
):
    error_ids = [o["id"]["field"] for o in ctx.outputs_list[0]]
    result = submit(
        task, norm, bool(sweep), sweep_norms, sweep_batch, sweep_seeds, _wildcard_values(), token, limits
    )
    errors = [result["errors"].get(f, "") for f in error_ids]
    if not result["run_ids"]:
        return (errors, result["message"], "message error", *([no_update] * len(BOARD_OUTPUTS)))
    previous = logic.split_list((board_state or {}).get("runs"))
    run_ids = [r for r in previous if r not in result["run_ids"]] + result["run_ids"]
    return (errors, result["message"], "message ok", *board(run_ids[-MAX_LIVE:], bool(present)))


@callback(
    *BOARD_OUTPUTS, Input(ids.LAB_CLEAR, "n_clicks"), State(ids.PRESENT, "data"), prevent_initial_call=True
)
def on_clear(_n, present):
    return board([], bool(present))


@callback(
    Output(ids.LAB_RUNS, "children"),
    Input(ids.LAB_RUNS_DATA, "data"),
    Input(ids.LIVE_STATUS, "data"),
    prevent_initial_call=True,
)
def on_runs(runs, live):
    if not runs:
        return EMPTY_BOARD
    return components.run_chips(runs, "norm", live)


def submit(
    task,
    norm,
    sweep: bool,
    sweep_norms,
    sweep_batch,
    sweep_seeds,
    form: dict,
    token: str | None = None,
    limits: dict | None = None,
) -> dict:
    """POST the run (or sweep); {"run_ids", "message", "errors": {field: the API's message}}.

    A shown number field left empty is refused here, with its range (the server's limits), instead of
    being left out of the spec — the API would quietly fill in the default."""
    names = FIELD_NAMES + lab_form.PROBE_NAMES + ["norm"]
    missing = lab_form.missing_messages(task, form, limits or {})
    if missing:
        return {"run_ids": [], "errors": missing, "message": _see_fields(missing)}
    spec = lab_form.build_spec(task, norm, form)
    try:
        if sweep:
            try:
                body = lab_form.sweep_body(spec, sweep_norms, sweep_batch, sweep_seeds)
            except ValueError as exc:
                return {"run_ids": [], "message": str(exc), "errors": {}}
            created = data.api(token).create_sweep(body)
            ids_ = created["run_ids"]
            return {
                "run_ids": ids_,
                "errors": {},
                "message": f"Started sweep {created['group_id']}: {len(ids_)} runs.",
            }
        created = data.api(token).create_run(spec)
        return {"run_ids": [created["id"]], "errors": {}, "message": f"Started run {created['id']}."}
    except ApiError as exc:
        errors = lab_form.field_messages(exc.fields, names)
        shown = len(errors) >= len(exc.fields) > 0  # every message sits next to its field
        return {"run_ids": [], "errors": errors, "message": _see_fields(errors) if shown else exc.detail}


def _see_fields(errors: dict) -> str:
    return f"Not started: see the message under {', '.join(lab_form.LABELS[f] for f in errors)}."


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


dash.register_page(__name__, path="/", name="Lab", title="normlab · Lab", order=0)
