"""Lab: the run builder (options from /api/catalog, the API's messages next to each field), a sweep
mode (normalizers × batch sizes × seeds), and the live view of the runs started here."""

from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, callback, ctx, dcc, html, no_update
from dash.development.base_component import Component

from frontend import components, data, ids, logic
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE
from normlab.catalog import NORMS

FIELD_NAMES = [name for name, _, _ in logic.FORM_FIELDS]
CHOICES = {"optimizer": ["adam", "sgd"], "cell": ["lstm", "gru", "tanh"], "ln_placement": ["full", "cell"]}
MAX_LIVE = 24


def _field(name: str, label: str, kind: str, value) -> html.Div:
    fid = {"type": ids.LAB_FIELD, "field": name}
    widget: Component
    if kind == "choice":
        widget = dcc.Dropdown(id=fid, options=CHOICES[name], value=value, clearable=name == "cell")
    elif kind == "flag":
        widget = dcc.Checklist(id=fid, options=[{"label": " record hidden-state traces and Fisher "
                                                 "curvature", "value": "on"}], value=value or [])
    else:
        widget = dcc.Input(id=fid, type="number", value=value, debounce=True, className="input",
                           step="any")
    return html.Div(id={"type": "lab-box", "field": name}, className="field", children=[
        html.Label(label, className="label"), widget,
        html.Div(id={"type": ids.LAB_ERROR, "field": name}, className="field-error", role="alert"),
    ])


def layout(runs: str | None = None, task: str | None = None, present: str | None = None, **_) -> html.Div:
    present_on = logic.is_present({"present": present})
    try:
        catalog = data.api().catalog()
    except ApiError as exc:
        return html.Div([components.error_box(exc.detail), *components.page_stores()])
    tasks = catalog["tasks"]
    task = task if task is not None and task in {t["name"] for t in tasks} else "digits"
    defaults = logic.field_defaults(task)
    run_ids = logic.split_list(runs)[-MAX_LIVE:]
    bundle = data.curves_bundle(run_ids, present=present_on)
    task_opts = [{"label": f"{t['name']}" + ("" if t["available"] else " (unavailable)"),
                  "value": t["name"], "disabled": not t["available"], "title": t.get("unavailable_reason")
                  or t["description"]} for t in tasks]
    builder = components.card("Run builder", className="builder controls", children=[
        html.Div(className="field", children=[
            html.Label("Task", className="label"),
            dcc.Dropdown(id=ids.LAB_TASK, options=task_opts, value=task, clearable=False),
            html.Div(id=ids.LAB_TASK_HELP, className="help"),
        ]),
        html.Div(id=ids.LAB_SINGLE_NORM_BOX, className="field", children=[
            html.Label("Normalizer", className="label"),
            dcc.Dropdown(id=ids.LAB_NORM, value="layer", clearable=False,
                         options=task_changed(task, {t["name"]: t for t in tasks}, "layer")[0]),
            html.Div(id={"type": ids.LAB_ERROR, "field": "norm"}, className="field-error", role="alert"),
        ]),
        dcc.Checklist(id=ids.LAB_SWEEP, className="sweep-toggle",
                      options=[{"label": " Sweep: several normalizers × batch sizes × seeds", "value": "on"}],
                      value=[]),
        html.Div(id=ids.LAB_SWEEP_BOX, className="sweep-box", style={"display": "none"}, children=[
            html.Label("Normalizers", className="label"),
            dcc.Checklist(id=ids.LAB_SWEEP_NORMS, value=["batch", "layer"], inline=True),
            html.Label("Batch sizes", className="label"),
            dcc.Input(id=ids.LAB_SWEEP_BATCH, value="4, 128", className="input"),
            html.Label("Seeds", className="label"),
            dcc.Input(id=ids.LAB_SWEEP_SEEDS, value="0", className="input"),
        ]),
        html.Div(className="field-grid", children=[
            _field(name, label, kind, defaults.get(name)) for name, label, kind in logic.FORM_FIELDS]),
        html.Div(className="actions", children=[
            html.Button("Start run", id=ids.LAB_SUBMIT, className="btn primary"),
            html.Div(id=ids.LAB_MESSAGE, className="message", role="status"),
        ]),
    ])
    live = components.card("Live", className="live", children=[
        html.Div(id=ids.LAB_RUNS, className="run-list",
                 children=components.run_chips(bundle["runs"]) or
                 html.P("Runs you start appear here and stream live.", className="muted")),
        dcc.Link("Compare these runs →", id=ids.LAB_COMPARE_LINK, className="compare-link",
                 href="/compare" + logic.encode_query({"runs": run_ids}),
                 style={} if run_ids else {"display": "none"}),
        *components.curves_graph(bundle["figure"], bundle["map"]),
    ])
    return html.Div(className="lab-page", children=[
        builder, live, dcc.Store(id="lab-runs-data", data=bundle["runs"]),
        *components.page_stores(bundle["watch"], {"runs": run_ids, "task": task}),
    ])


def task_changed(task: str, catalog_tasks: dict, norm: str | None) -> tuple:
    """Outputs when the task changes: norm options and value, sweep options, field values, which
    fields show, help text. The chosen normalizer stays when the new task has it."""
    info = catalog_tasks[task]
    defaults = logic.field_defaults(task)
    sequential = info["kind"] == "sequence"
    values = [defaults.get(n) for n in FIELD_NAMES]
    styles = [{"display": "none"} if n in logic.SEQUENCE_ONLY and not sequential else {} for n in FIELD_NAMES]
    norms = [{"label": n, "value": n, "title": NORMS.get(n, "")} for n in info["norms"]]
    keep = norm if norm in info["norms"] else ("layer" if "layer" in info["norms"] else info["norms"][0])
    return norms, keep, norms, values, styles, info["description"]


@callback(
    Output(ids.LAB_NORM, "options"), Output(ids.LAB_NORM, "value"),
    Output(ids.LAB_SWEEP_NORMS, "options"),
    Output({"type": ids.LAB_FIELD, "field": ALL}, "value"),
    Output({"type": "lab-box", "field": ALL}, "style"), Output(ids.LAB_TASK_HELP, "children"),
    Input(ids.LAB_TASK, "value"), State(ids.LAB_NORM, "value"))
def on_task(task, norm):
    tasks = {t["name"]: t for t in data.api().catalog()["tasks"]}
    return task_changed(task, tasks, norm)


@callback(Output(ids.LAB_SWEEP_BOX, "style"), Output(ids.LAB_SINGLE_NORM_BOX, "style"),
          Output(ids.LAB_SUBMIT, "children"), Input(ids.LAB_SWEEP, "value"))
def on_sweep_toggle(sweep):
    on = bool(sweep)
    return ({} if on else {"display": "none"}, {"display": "none"} if on else {},
            "Start sweep" if on else "Start run")


@callback(
    Output({"type": ids.LAB_ERROR, "field": ALL}, "children"), Output(ids.LAB_MESSAGE, "children"),
    Output(ids.LAB_MESSAGE, "className"), Output(ids.URL_STATE, "data", allow_duplicate=True),
    Output(ids.WATCH, "data", allow_duplicate=True), Output(ids.CURVES, "figure", allow_duplicate=True),
    Output(ids.CURVES_MAP, "data", allow_duplicate=True), Output("lab-runs-data", "data"),
    Output(ids.LAB_COMPARE_LINK, "href"), Output(ids.LAB_COMPARE_LINK, "style"),
    Input(ids.LAB_SUBMIT, "n_clicks"),
    State(ids.LAB_TASK, "value"), State(ids.LAB_NORM, "value"), State(ids.LAB_SWEEP, "value"),
    State(ids.LAB_SWEEP_NORMS, "value"), State(ids.LAB_SWEEP_BATCH, "value"),
    State(ids.LAB_SWEEP_SEEDS, "value"), State({"type": ids.LAB_FIELD, "field": ALL}, "value"),
    State(ids.URL_STATE, "data"), State(ids.PRESENT, "data"), State(TOKEN_STORE, "data"),
    prevent_initial_call=True)
def on_submit(_n, task, norm, sweep, sweep_norms, sweep_batch, sweep_seeds, values, url_state,
              present, token):
    error_ids = [o["id"]["field"] for o in ctx.outputs_list[0]]
    field_states = next(s for s in ctx.states_list if isinstance(s, list))  # the ALL wildcard
    form = {o["id"]["field"]: v for o, v in zip(field_states, values, strict=True)}
    result = submit(task, norm, bool(sweep), sweep_norms, sweep_batch, sweep_seeds, form, token)
    errors = [result["errors"].get(f, "") for f in error_ids]
    if not result["run_ids"]:
        return (errors, result["message"], "message error", *([no_update] * 7))
    previous = logic.split_list((url_state or {}).get("runs"))
    run_ids = [r for r in previous if r not in result["run_ids"]] + result["run_ids"]
    run_ids = run_ids[-MAX_LIVE:]
    bundle = data.curves_bundle(run_ids, present=bool(present))
    return (errors, result["message"], "message ok", {"runs": run_ids, "task": task}, bundle["watch"],
            bundle["figure"], bundle["map"], bundle["runs"],
            "/compare" + logic.encode_query({"runs": run_ids}), {})


@callback(Output(ids.LAB_RUNS, "children"), Input("lab-runs-data", "data"),
          Input(ids.LIVE_STATUS, "data"), prevent_initial_call=True)
def on_runs(runs, live):
    if not runs:
        return no_update
    return components.run_chips(runs, "norm", live)


def submit(task, norm, sweep: bool, sweep_norms, sweep_batch, sweep_seeds, form: dict,
           token: str | None = None) -> dict:
    """POST the run (or sweep); {"run_ids", "message", "errors": {field: the API's message}}."""
    spec = logic.build_spec(task, norm, form)
    try:
        if sweep:
            try:
                body = logic.sweep_body(spec, sweep_norms, sweep_batch, sweep_seeds)
            except ValueError as exc:
                return {"run_ids": [], "message": str(exc), "errors": {}}
            created = data.api(token).create_sweep(body)
            ids_ = created["run_ids"]
            return {"run_ids": ids_, "errors": {},
                    "message": f"Started sweep {created['group_id']}: {len(ids_)} runs."}
        created = data.api(token).create_run(spec)
        return {"run_ids": [created["id"]], "errors": {}, "message": f"Started run {created['id']}."}
    except ApiError as exc:
        errors = logic.field_messages(exc.fields, FIELD_NAMES + ["norm"])
        shown = len(errors) >= len(exc.fields) > 0  # every message sits next to its field
        labels = dict((n, label) for n, label, _ in logic.FORM_FIELDS) | {"norm": "Normalizer"}
        message = (f"Not started: see the message under {', '.join(labels[f] for f in errors)}."
                   if shown else exc.detail)
        return {"run_ids": [], "errors": errors, "message": message}


dash.register_page(__name__, path="/", name="Lab", title="normlab · Lab", order=0)
