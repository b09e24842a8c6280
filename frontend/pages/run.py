"""Run: every panel for one run — curves, hidden-state and gradient heatmaps, Fisher curvature — with
its spec, status, device, kernel backend and export links."""

from __future__ import annotations

from typing import Any

import dash
from dash import ClientsideFunction, Input, Output, State, callback, clientside_callback, dcc, html, no_update
from dash.development.base_component import Component

from frontend import (
    components,
    data,
    figures,
    fork_view,
    hidden_figures,
    ids,
    init_gradients,
    lab_form,
    logic,
    probe_figures,
    probe_names,
    run_labels,
    smoothing_control,
)
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE
from normlab_client.catalog import TASKS
from normlab_client.spec import TRANSFORMER_TASKS


def header(run: dict[str, Any], api_base: str = "") -> list[Component]:
    """Status line, facts (device, kernel backend, worker, times), error, export links."""
    rid = run["id"]
    facts = [
        ("Device", run.get("device")),
        ("Kernel backend", run.get("kernel_backend")),
        ("Worker", run.get("worker_host")),
        ("Owner", run.get("owner")),
        ("Group", run.get("group_id")),
        ("Created", logic.when(run.get("created_at"))),
        ("Started", logic.when(run.get("started_at"))),
        ("Finished", logic.when(run.get("finished_at"))),
        ("Result", logic.final_metric(run)),
    ]
    if run.get("queue_position"):
        facts.insert(0, ("Queue position", str(run["queue_position"])))
    out: list[Component] = [
        html.Div(
            className="run-title",
            children=[
                html.Span(
                    className="swatch big",
                    style={"background": figures.norm_color(run.get("spec", {}).get("norm", ""))},
                ),
                html.H2(figures.run_label(run)),
                components.badge(run.get("status", "")),
                html.Code(rid, className="run-id"),
            ],
        ),
        html.Dl(className="facts", children=[html.Div([html.Dt(k), html.Dd(str(v))]) for k, v in facts if v]),
    ]
    if run.get("error"):
        out.append(components.error_box(run["error"]))
    out.append(
        html.Div(
            className="actions",
            children=[
                html.A(
                    "Export CSV",
                    href=f"{api_base}/api/runs/{rid}/export?format=csv",
                    className="btn small",
                    download=f"{rid}.csv",
                ),
                html.A(
                    "Export JSON",
                    href=f"{api_base}/api/runs/{rid}/export?format=json",
                    className="btn small",
                    download=f"{rid}.json",
                ),
                dcc.Link("Compare with others →", href=f"/compare?runs={rid}", className="btn small"),
                html.Button(
                    "Cancel run",
                    id=ids.RUN_CANCEL,
                    className="btn small danger",
                    style={} if logic.can_cancel(run.get("status", "")) else {"display": "none"},
                ),
                html.Button(
                    "Resume",
                    id=ids.RUN_RESUME,
                    className="btn small",
                    title="Continue this run from its latest checkpoint, as the same run",
                    style={} if run.get("status") == "lost" else {"display": "none"},
                ),
                html.Span(id=ids.RUN_MESSAGE, className="message", role="status"),
            ],
        )
    )
    return out


def spec_table(spec: dict[str, Any]) -> html.Table:
    rows = []
    for key, value in spec.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        rows.append(html.Tr([html.Th(key), html.Td(str(value))]))
    return html.Table(className="spec", children=html.Tbody(rows))


def layout(
    run_id: str | None = None,
    present: str | None = None,
    smooth: str | None = None,
    panels: str | None = None,
    **_: str,
) -> html.Div:
    present_on = logic.is_present({"present": present})
    # a copied link carries the smoothing and panels it was copied with; without them, the browser's
    view = logic.compare_state({"smooth": smooth, "panels": panels})
    weight = view["smooth"] if smooth not in (None, "") else None
    chosen = view["panels"] if panels else None
    try:
        run = data.api().run(run_id or "")
        family = fork_view.family_ids(run)  # a fork's parent and siblings share its chart
        bundle = data.curves_bundle(
            family, smoothing=weight, panels=chosen, present=present_on, from_start=True
        )
    except ApiError as exc:
        msg = f"No run '{run_id}'. Pick one on the Runs page." if exc.status == 404 else exc.detail
        return html.Div([components.error_box(msg), *components.page_stores()])
    spec = run.get("spec", {})
    probes = spec.get("probes", {}).get("enabled")
    off = {} if probes else {"display": "none"}
    note = (
        ""
        if probes
        else (
            "Probes were off for this run, so there are no hidden-state or curvature "
            "panels: start a run with probes on (Lab → Probes) to see them."
        )
    )
    fisher_note = ((run.get("summary") or {}).get("probes") or {}).get("fisher_note") or ""
    sequential = TASKS[spec["task"]].kind == "sequence" if spec.get("task") in TASKS else False
    return html.Div(
        className="run-page",
        children=[
            html.Div(id=ids.RUN_HEADER, className="card", children=header(run, data.api_base())),
            fork_view.lineage_strip(run),
            html.Div(
                className="card",
                children=[
                    html.H2("Curves"),
                    html.P(probe_names.PANEL_HELP["curves"], className="panel-help"),
                    smoothing_control.control(ids.RUN_SMOOTH, bundle["map"].get("smooth", 0.0)),
                    *components.curves_graph(bundle["figure"], bundle["map"]),
                ],
            ),
            fork_view.change_card(run),
            fork_view.fork_card(run),
            html.Div(
                className="card",
                style={} if spec.get("task") in TRANSFORMER_TASKS else {"display": "none"},
                children=[
                    html.H2("Gradient norms at initialisation"),
                    html.P(
                        "‖∂ℓ/∂W‖ over each block's weight matrices at the first step, before any update, "
                        f"{spec.get('ln_position', 'pre')}-LN: with post-LN the blocks next to the output "
                        "take larger gradients relative to the first than with pre-LN (Xiong et al. 2020).",
                        className="panel-help",
                    ),
                    dcc.Graph(
                        id=ids.RUN_INIT_GRADS,
                        figure=init_gradients.init_gradient_figure([], spec.get("norm", "layer"), present_on),
                        config=components.GRAPH_CONFIG,
                        className="graph",
                    ),
                ],
            ),
            html.Div(className="card muted", children=note, style={} if note else {"display": "none"}),
            html.Div(
                className="card",
                style=off,
                children=[
                    # feed-forward runs have no time steps: their panel shows each layer over training
                    html.H2("Hidden states over time steps" if sequential else "Layer statistics"),
                    html.P(
                        probe_names.PANEL_HELP["hidden" if sequential else "layers"], className="panel-help"
                    ),
                    dcc.Graph(
                        id=ids.RUN_HIDDEN,
                        figure=hidden_figures.hidden_figure([], present_on, None),  # None: loading
                        config=components.GRAPH_CONFIG,
                        className="graph",
                    ),
                    components.svg_button(ids.RUN_HIDDEN),
                ],
            ),
            html.Div(
                className="card",
                style=off,
                children=[
                    html.H2("Fisher curvature"),
                    html.P(probe_names.PANEL_HELP["fisher"], className="panel-help"),
                    html.Ul(
                        [html.Li(line) for line in probe_names.FISHER_SUBPLOT_HELP], className="panel-help"
                    ),
                    html.Div(
                        fisher_note, id=ids.RUN_FISHER_WARNING, className="fisher-warning", role="status"
                    ),
                    html.Div(id=ids.RUN_FISHER_RETRY, className="fisher-retry"),
                    dcc.Graph(
                        id=ids.RUN_FISHER,
                        figure=probe_figures.fisher_figure([], present_on, None),
                        config=components.GRAPH_CONFIG,
                        className="graph",
                    ),
                    components.svg_button(ids.RUN_FISHER),
                ],
            ),
            html.Div(
                className="card run-log",
                children=[
                    html.H2("Log"),
                    html.Ul(id=ids.RUN_LOG, className="log-list", children=log_items([])),
                ],
            ),
            run_labels.labels_card(run),
            html.Div(
                className="card controls", children=[html.H2("Spec (resolved)"), spec_table(run["spec"])]
            ),
            dcc.Store(id=ids.RUN_ID, data=run["id"]),
            dcc.Store(id=ids.RUN_SPEC, data=run["spec"]),
            dcc.Store(id=ids.RUN_PROBES, data={"hidden": [], "fisher": [], "log": []}),
            dcc.Store(id=ids.RUN_LINES, data=[]),
            *components.page_stores(
                bundle["watch"], {"smooth": bundle["map"].get("smooth"), "panels": chosen}
            ),
        ],
    )


smoothing_control.register(ids.RUN_SMOOTH)  # the smoothing slider redraws the curves
# ... and the URL follows it, so "Copy link" opens the run as seen (assets/normlab.js urlState)
clientside_callback(
    """function (weight, state) {
        if (weight === undefined || weight === null) { return window.dash_clientside.no_update; }
        return Object.assign({}, state || {}, {smooth: weight});
    }""",
    Output(ids.URL_STATE, "data", allow_duplicate=True),
    Input(ids.RUN_SMOOTH, "value"),
    State(ids.URL_STATE, "data"),
    prevent_initial_call=True,
)


LEVEL_ORDER = {"error": 0, "warning": 1}  # then info (and anything else), each in the order it came
MAX_INFO_LINES = 50  # the newest info lines (evaluations, status changes); errors and warnings all
EVAL_NAMES = {"val_loss": "val loss", "accuracy": "accuracy", "bpc": "bpc", "mse": "mse"}


def log_items(events: list[dict[str, Any]]) -> list[html.Li]:
    """The run's log as list items, errors and warnings first: its `log` events, and, as the stream
    brings them, its status changes (kind "status") and evaluations (kind "eval", a scalars payload)."""
    if not events:
        return [html.Li("No log lines yet.", className="muted")]
    seen: dict[tuple[str, str], int] = {}  # a line repeated (a warning during the run and at its end): once
    for i, e in enumerate(events):
        seen.setdefault((_level(e), _message(e)), i)
    ranked = sorted(
        ((i, events[i]) for i in seen.values()), key=lambda ie: (LEVEL_ORDER.get(_level(ie[1]), 2), ie[0])
    )
    info = [i for i, e in ranked if _level(e) not in LEVEL_ORDER]
    shown = set(info[-MAX_INFO_LINES:])
    items = [
        html.Li(
            className=f"log-line {_level(e)}",
            children=[
                html.Span(_level(e), className=f"log-level {_level(e)}"),
                html.Span(f"step {e.get('step', 0)}", className="log-step"),
                html.Span(_message(e), className="log-message"),
            ],
        )
        for i, e in ranked
        if _level(e) in LEVEL_ORDER or i in shown
    ]
    if len(info) > len(shown):
        items.append(html.Li(f"{len(info) - len(shown)} earlier lines not shown", className="muted"))
    return items


def _level(event: dict[str, Any]) -> str:
    payload = event.get("payload") or {}
    if event.get("kind") == "status":
        return "error" if payload.get("status") == "failed" else "info"
    if event.get("kind") == "eval":
        return "info"
    return str(payload.get("level") or "info")


def _message(event: dict[str, Any]) -> str:
    payload = event.get("payload") or {}
    if event.get("kind") == "status":
        said = payload.get("message")
        return f"run {payload.get('status', '')}" + (
            f": {said}" if said and said != payload.get("status") else ""
        )
    if event.get("kind") == "eval":
        parts = [
            f"{label} {payload[key]:.4g}"
            for key, label in EVAL_NAMES.items()
            if isinstance(payload.get(key), int | float)
        ]
        return "evaluation: " + ", ".join(parts)
    return str(payload.get("message", ""))


def fisher_warning(events: list[dict[str, Any]], fallback: str = "") -> str:
    """The log's warnings about the Fisher estimate (e.g. none fitted the probe budget, and the budget
    that would), shown where the Fisher panel is; `fallback` (the run summary's note) without them."""
    lines = [
        str((e.get("payload") or {}).get("message", "")) for e in events if _level(e) in ("warning", "error")
    ]
    lines = [line for line in lines if "fisher" in line.lower()]
    return " ".join(dict.fromkeys(lines)) or fallback


# the stream's probe snapshots and log lines, each at most once a second (assets/normlab.js)
clientside_callback(
    ClientsideFunction("normlab", "runFeed"),
    Output(ids.RUN_PROBES, "data"),
    Output(ids.RUN_LINES, "data"),
    Input(ids.TICK, "n_intervals"),
    State(ids.RUN_ID, "data"),
    prevent_initial_call=True,
)


@callback(Output(ids.RUN_LOG, "children"), Input(ids.RUN_LINES, "data"), prevent_initial_call=True)
def on_lines(lines: list[dict[str, Any]] | None) -> list[html.Li]:
    """The log panel, live: log lines, status changes and evaluations as the stream brings them."""
    return log_items(lines or [])


@callback(
    Output(ids.RUN_INIT_GRADS, "figure"),
    Input(ids.RUN_LINES, "data"),
    State(ids.RUN_SPEC, "data"),
    State(ids.PRESENT, "data"),
    prevent_initial_call=True,
)
def on_init_gradients(
    lines: list[dict[str, Any]] | None, spec: dict[str, Any] | None, present: bool | None
) -> object:
    """A Transformer run's per-block gradient norms at initialisation, once its first step logged them."""
    if (spec or {}).get("task") not in TRANSFORMER_TASKS:
        return no_update
    return init_gradients.init_gradient_figure(lines or [], (spec or {}).get("norm", "layer"), bool(present))


@callback(
    Output(ids.RUN_HIDDEN, "figure"),
    Output(ids.RUN_FISHER, "figure"),
    Output(ids.RUN_FISHER_WARNING, "children"),
    Output(ids.RUN_FISHER_RETRY, "children"),
    Input(ids.RUN_PROBES, "data"),
    State(ids.PRESENT, "data"),
    State(ids.RUN_FISHER_WARNING, "children"),
    State(ids.RUN_ID, "data"),
    State(ids.RUN_SPEC, "data"),
    prevent_initial_call=True,
)
def on_probes(
    probes: dict[str, Any] | None,
    present: bool | None,
    note: str | None,
    run_id: str | None,
    spec: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], str, list[dcc.Link]]:
    probes = probes or {}
    ended, log = probes.get("ended", False), probes.get("log", [])
    fishers, warned = probes.get("fisher", []), fisher_warning(log)
    return (
        hidden_figures.hidden_figure(probes.get("hidden", []), bool(present), ended),
        probe_figures.fisher_figure(fishers, bool(present), ended, blocked=bool(warned), spec=spec),
        fisher_warning(log, note or ""),
        [] if fishers else retry_link(run_id, log),
    )


def retry_link(run_id: str | None, log: list[dict[str, Any]]) -> list[dcc.Link]:
    """ "Run it again with a budget of X %": a link to the Lab with this run's form and the budget its
    warning asks for (nothing without such a warning)."""
    budget = lab_form.budget_that_fits(log)
    if budget is None or not run_id:
        return []
    try:
        spec = data.api().run(run_id)["spec"]
        largest = lab_form.field_limits(data.api().catalog()["fields"])["budget"]["max"]
    except ApiError:
        return []
    if largest is not None and budget > largest:  # the warning says to train longer instead
        return []
    href = "/" + logic.encode_query(lab_form.query_from_spec(spec, budget=budget))
    return [
        dcc.Link(
            f"Set this run up again in the Lab with a {budget:g} % probe budget →",
            href=href,
            className="btn small",
        )
    ]


@callback(
    Output(ids.RUN_HEADER, "children"),
    Input(ids.LIVE_STATUS, "data"),
    State(ids.RUN_ID, "data"),
    prevent_initial_call=True,
)
def on_status(live: dict[str, str] | None, run_id: str | None) -> object:
    if not run_id or run_id not in (live or {}):
        return no_update
    try:
        return header(data.api().run(run_id), data.api_base())
    except ApiError:
        return no_update


@callback(
    Output(ids.RUN_MESSAGE, "children"),
    Input(ids.RUN_CANCEL, "n_clicks"),
    State(ids.RUN_ID, "data"),
    State(TOKEN_STORE, "data"),
    prevent_initial_call=True,
)
def on_cancel(_n: int | None, run_id: str, token: str | None) -> str:
    try:
        data.api(token).cancel(run_id)
    except ApiError as exc:
        return exc.detail
    return "Cancel requested."


@callback(
    Output(ids.RUN_MESSAGE, "children", allow_duplicate=True),
    Input(ids.RUN_RESUME, "n_clicks"),
    State(ids.RUN_ID, "data"),
    State(TOKEN_STORE, "data"),
    prevent_initial_call=True,
)
def on_resume(_n: int | None, run_id: str, token: str | None) -> str:
    """A lost run queued again as itself; its curve goes on live where it stopped (the page follows)."""
    try:
        made = data.api(token).resume(run_id)
    except ApiError as exc:
        return exc.detail
    return f"Resuming from its checkpoint of step {made['from_step']}…"


# nav=False: a run's page is reached from the others (chips, the Runs table), not from the top bar
dash.register_page(  # type: ignore[no-untyped-call]  # dash's register_page is unannotated
    __name__, path_template="/run/<run_id>", name="Run", title="normlab · Run", order=5, nav=False
)
