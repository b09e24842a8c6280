"""Runs: the shared results browser — filter, sort, status badges, select to compare, cancel, delete;
tick one run to edit its name, tags and note (its owner or an admin: frontend/run_labels.py).

The results are numeric columns (val loss, accuracy / bpc / mse, steps/s, wall time): they sort as
numbers; a metric column no listed run has is left out."""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, Input, Output, State, callback, ctx, dcc, html, no_update
from dash.dash_table.DataTable import DataTable
from dash.dash_table.Format import Format, Scheme

from frontend import components, data, ids, logic, run_labels, status
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE
from normlab_client.catalog import NORMS, TASKS
from normlab_client.events import RunStatus

FILTERS = [
    ("q", "Search", None),  # the id, name, note, owner, task or normalizer
    ("tag", "Tag", None),
    ("task", "Task", list(TASKS)),
    ("norm", "Normalizer", list(NORMS)),
    ("status", "Status", [s.value for s in RunStatus]),
    ("owner", "Owner", None),
    ("group", "Group", None),
    ("created_after", "Since (date)", None),
]
COLUMNS = [
    ("status", "Status"),
    ("name", "Name"),
    ("task", "Task"),
    ("norm", "Normalizer"),
    ("batch_size", "Batch"),
    ("seed", "Seed"),
    ("steps", "Steps"),
    ("val_loss", "Val loss"),
    ("accuracy", "Accuracy"),
    ("bpc", "BPC"),
    ("mse", "MSE"),
    ("steps_per_s", "Steps/s"),
    ("wall_time", "Wall (s)"),
    ("owner", "Owner"),
    ("tags", "Tags"),
    ("group", "Group"),
    ("created", "Created (UTC)"),
    ("link", "Run"),
]
NUMERIC = {"batch_size", "seed", "steps", "val_loss", "accuracy", "bpc", "mse", "steps_per_s", "wall_time"}
# 4 significant digits, no trailing zeros (dash's Format is unannotated)
SIGNIFICANT = Format(precision=4, scheme=Scheme.decimal)  # type: ignore[no-untyped-call]
OPTIONAL = set(logic.RESULT_METRICS)  # shown only when a listed run has one
TIPS: dict[str | float | int, Any] = {
    "accuracy": "final test accuracy (validation when the run has no test evaluation)",
    "bpc": "final test bits per character (validation when there is no test evaluation)",
    "mse": "final test mean squared error (validation when there is no test evaluation)",
    "val_loss": "final validation loss (sorted within each task: the tasks' losses are not comparable)",
    "steps_per_s": "training steps ÷ wall time (set-up included)",
    "wall_time": "seconds from the run's start to its end",
}


def columns(rows: list[dict[str, Any]]) -> list[Any]:  # Any: DataTable types columns as a TypedDict
    """The table's columns: numbers typed numeric (they sort as numbers), metric columns only when some
    row has that metric."""
    out = []
    for c, name in COLUMNS:
        if c in OPTIONAL and not any(r.get(c) is not None for r in rows):
            continue
        col: dict[str, Any] = {"name": name, "id": c}
        if c in ("link", "group"):
            col["presentation"] = "markdown"
        elif c in NUMERIC:
            col["type"] = "numeric"
            if c in ("val_loss", *OPTIONAL):
                col["format"] = SIGNIFICANT
        out.append(col)
    return out


def _filter(name: str, label: str, options: list[str] | None, value: str | None) -> html.Div:
    fid = {"type": ids.RUNS_FILTER, "field": name}
    widget = (
        dcc.Dropdown(id=fid, options=options, value=value, placeholder="any", clearable=True)
        if options
        else dcc.Input(id=fid, value=value or "", debounce=True, placeholder="any", className="input")
    )
    return html.Div(className="field", children=[html.Label(label, className="label"), widget])


def layout(present: str | None = None, **params: str) -> html.Div:
    table = DataTable(
        id=ids.RUNS_TABLE,
        data=[],
        columns=columns([]),
        tooltip_header=TIPS,
        filter_options={"placeholder_text": "filter…"},
        markdown_options={"link_target": "_self"},
        row_selectable="multi",
        selected_rows=[],
        sort_action="native",
        filter_action="native",
        page_size=25,
        style_as_list_view=True,
        style_cell={
            "fontFamily": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
            "fontSize": 14,
            "padding": "6px 10px",
            "textAlign": "left",
        },
        style_header={"fontWeight": 600, "background": "#f4f6f8"},
        style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "right"} for c in sorted(NUMERIC)],
        style_data_conditional=status.table_styles("status"),
    )
    return html.Div(
        className="runs-page",
        children=[
            components.card(
                "Runs",
                className="controls",
                children=[
                    html.Div(
                        className="filter-row",
                        children=[_filter(n, label, opts, params.get(n)) for n, label, opts in FILTERS],
                    ),
                    html.Div(
                        className="actions",
                        children=[
                            dcc.Link(
                                "Compare selected →",
                                id=ids.RUNS_COMPARE,
                                href="/compare",
                                className="btn primary",
                            ),
                            html.Button("Cancel selected", id=ids.RUNS_CANCEL, className="btn"),
                            html.Button("Delete selected", id=ids.RUNS_DELETE, className="btn danger"),
                            html.Button("Refresh", id=ids.RUNS_REFRESH, className="btn"),
                            html.Div(id=ids.RUNS_MESSAGE, className="message", role="status"),
                        ],
                    ),
                ],
            ),
            html.Div(table, className="card table-card"),
            html.Div(
                [
                    run_labels.labels_card({}, run_labels.RUNS_PAGE, "Name, tags and note of the ticked run"),
                    html.Div(PICK_ONE, id=ids.RUNS_LABELS_WHICH, className="muted"),
                    dcc.Store(id=ids.RUNS_LABELS_RUN),
                ],
                className="controls runs-labels",
            ),
            dcc.Interval(id=ids.RUNS_POLL, interval=5000),
            *components.page_stores(None, {k: params.get(k) for k, _, _ in FILTERS}),
        ],
    )


@callback(
    Output(ids.RUNS_TABLE, "data"),
    Output(ids.RUNS_TABLE, "columns"),
    Output(ids.RUNS_TABLE, "selected_rows"),
    Output(ids.RUNS_MESSAGE, "children"),
    Output(ids.URL_STATE, "data", allow_duplicate=True),
    Input({"type": ids.RUNS_FILTER, "field": ALL}, "value"),
    Input(ids.RUNS_REFRESH, "n_clicks"),
    Input(ids.RUNS_POLL, "n_intervals"),
    Input(ids.RUNS_CANCEL, "n_clicks"),
    Input(ids.RUNS_DELETE, "n_clicks"),
    State(ids.RUNS_TABLE, "data"),
    State(ids.RUNS_TABLE, "selected_rows"),
    State(TOKEN_STORE, "data"),
    prevent_initial_call="initial_duplicate",
)
def on_refresh(
    values: list[str | None],
    _r: int | None,
    _p: int | None,
    _c: int | None,
    _d: int | None,
    rows: list[dict[str, Any]] | None,
    selected: list[int] | None,
    token: str | None,
) -> tuple[object, ...]:
    filters = {o["id"]["field"]: v for o, v in zip(ctx.inputs_list[0], values, strict=True)}
    message = ""
    chosen = [rows[i] for i in (selected or []) if rows and i < len(rows)]
    if ctx.triggered_id in (ids.RUNS_CANCEL, ids.RUNS_DELETE):
        message = act(ctx.triggered_id, chosen, token)
    try:
        listing = data.api().runs(**logic.runs_query(filters))
    except ApiError as exc:
        return [], no_update, [], exc.detail, no_update
    new_rows = logic.run_rows(listing["items"])
    keep = {r["id"] for r in chosen} if ctx.triggered_id not in (ids.RUNS_DELETE,) else set()
    new_sel = [i for i, r in enumerate(new_rows) if r["id"] in keep]
    if not message and listing.get("total", 0) > len(new_rows):
        message = f"Showing the newest {len(new_rows)} of {listing['total']} runs."
    return new_rows, columns(new_rows), new_sel, message, filters


# losses and metrics of different tasks are not comparable (cross-entropy, MSE, bits per character)
BY_TASK = {"val_loss", *OPTIONAL}


@callback(
    Output(ids.RUNS_TABLE, "sort_by"),
    Input(ids.RUNS_TABLE, "sort_by"),
    State(ids.RUNS_TABLE, "data"),
    prevent_initial_call=True,
)
def sort_within_task(sort_by: list[dict[str, str]] | None, rows: list[dict[str, Any]] | None) -> object:
    """A sort by a loss or metric column groups the runs by task first, when the table lists several:
    a val loss of one task is never ranked against another task's."""
    sort_by = list(sort_by or [])
    metric = next((s for s in sort_by if s.get("column_id") != "task"), None)
    if metric is None or metric.get("column_id") not in BY_TASK:
        return no_update
    if len({r.get("task") for r in rows or []}) < 2:
        return no_update
    wanted = [{"column_id": "task", "direction": "asc"}, metric]
    return no_update if sort_by == wanted else wanted


@callback(
    Output(ids.RUNS_COMPARE, "href"), Input(ids.RUNS_TABLE, "selected_rows"), State(ids.RUNS_TABLE, "data")
)
def compare_href(selected: list[int] | None, rows: list[dict[str, Any]] | None) -> str:
    chosen = [rows[i]["id"] for i in (selected or []) if rows and i < len(rows)]
    return "/compare" + logic.encode_query({"runs": chosen})


PICK_ONE = "Tick one run in the table to edit its name, tags and note."


@callback(
    Output(ids.RUNS_NAME, "value"),
    Output(ids.RUNS_TAGS, "value"),
    Output(ids.RUNS_NOTE, "value"),
    Output(ids.RUNS_LABELS_RUN, "data"),
    Output(ids.RUNS_LABELS_WHICH, "children"),
    Input(ids.RUNS_TABLE, "selected_rows"),
    State(ids.RUNS_TABLE, "data"),
    State(ids.RUNS_LABELS_RUN, "data"),
    prevent_initial_call=True,
)
def on_pick(
    selected: list[int] | None, rows: list[dict[str, Any]] | None, shown: str | None
) -> tuple[object, ...]:
    """The ticked run's name, tags and note in the fields (one run ticked); a poll that keeps the same
    run ticked leaves the fields as they are, so an edit in progress is never overwritten."""
    chosen = [rows[i] for i in (selected or []) if rows and i < len(rows)]
    if len(chosen) != 1:
        return "", "", "", None, PICK_ONE
    row = chosen[0]
    if row["id"] == shown:
        return (no_update,) * 5
    which = f"Editing {row['id']}" + (f" ({row['name']})" if row.get("name") else "") + "."
    return (
        row.get("name") or "",
        run_labels.tags_text(row.get("tags")),
        row.get("note") or "",
        row["id"],
        which,
    )


@callback(
    Output(ids.RUNS_LABELS_MESSAGE, "children"),
    Input(ids.RUNS_LABELS_SAVE, "n_clicks"),
    State(ids.RUNS_LABELS_RUN, "data"),
    State(ids.RUNS_NAME, "value"),
    State(ids.RUNS_TAGS, "value"),
    State(ids.RUNS_NOTE, "value"),
    State(TOKEN_STORE, "data"),
    prevent_initial_call=True,
)
def on_save_labels(
    _n: int | None,
    run_id: str | None,
    name: str | None,
    tags: str | None,
    note: str | None,
    token: str | None,
) -> str:
    if not run_id:
        return PICK_ONE
    return run_labels.save(run_id, name, tags, note, token)


def act(which: str, rows: list[dict[str, Any]], token: str | None = None) -> str:
    """Cancel or delete the selected runs; one line saying what happened."""
    if not rows:
        return "Select runs first (tick the boxes on the left)."
    done, problems = 0, []
    for r in rows:
        try:
            if which == ids.RUNS_CANCEL:
                if not logic.can_cancel(r["status"]):
                    problems.append(f"{r['id']} is {r['status']}")
                    continue
                data.api(token).cancel(r["id"])
            else:
                data.api(token).delete(r["id"])
            done += 1
        except ApiError as exc:
            problems.append(f"{r['id']}: {exc.detail}")
    verb = "Cancelled" if which == ids.RUNS_CANCEL else "Deleted"
    return f"{verb} {done} run(s)." + (f" Not done: {'; '.join(problems)}." if problems else "")


dash.register_page(  # type: ignore[no-untyped-call]  # dash's register_page is unannotated
    __name__, path="/runs", name="Runs", title="normlab · Runs", order=1
)
