"""The Lab's run builder: task, normalizer, the sweep box, one field per RunSpec setting (its limits from
this server's catalog) and the probe settings, built from the URL's query, and rebuilt for a new task
(`task_changed`). The page and its callbacks are in `frontend/pages/lab.py`."""

from __future__ import annotations

from typing import Any

from dash import dcc, html
from dash.development.base_component import Component

from frontend import components, ids, lab_form, logic
from normlab_client.catalog import NORMS

FIELD_NAMES = [name for name, _, _ in lab_form.FORM_FIELDS]
CHOICES = {
    "optimizer": ["adam", "sgd"],
    "cell": ["lstm", "gru", "tanh"],
    "ln_placement": ["full", "cell"],
    "ln_position": ["pre", "post"],
}


def _widget(fid: dict[str, str], name: str, kind: str, value: Any, limits: dict[str, Any]) -> Component:
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
    name: str,
    label: str,
    kind: str,
    value: Any,  # what the form holds: a number, a string, a list of ticked boxes, or nothing
    limits: dict[str, Any],
    hidden: bool = False,
    probe: bool = False,
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


def task_changed(
    task: str, catalog_tasks: dict[str, Any], norm: str | None
) -> tuple[list[dict[str, Any]], str | None, list[dict[str, Any]], list[Any], list[dict[str, str]], str]:
    """Outputs when the task changes: norm options and value, sweep options, field values, which
    fields show, help text. The chosen normalizer stays when the new task has it."""
    info = catalog_tasks[task]
    defaults = lab_form.field_defaults(task)
    values = [defaults.get(n) for n in FIELD_NAMES]
    styles = [{} if lab_form.applies(n, task) else {"display": "none"} for n in FIELD_NAMES]
    norms = [{"label": n, "value": n, "title": NORMS.get(n, "")} for n in info["norms"]]
    keep = norm if norm in info["norms"] else ("layer" if "layer" in info["norms"] else info["norms"][0])
    return norms, keep, norms, values, styles, info["description"]


def builder(
    catalog: dict[str, Any], task: str, query: dict[str, str], values: dict[str, Any], limits: dict[str, Any]
) -> Component:
    """The "Run builder" card for `task`, its fields at `values` (normalizer and sweep box from `query`)."""
    tasks = {t["name"]: t for t in catalog["tasks"]}
    norm_opts, norm, sweep_opts, _, styles, help_text = task_changed(task, tasks, query.get("norm"))
    sweep_on = query.get("sweep") == "1"
    sweep_norms = [n for n in logic.split_list(query.get("sweep_norms")) if n in tasks[task]["norms"]]
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
    return components.card(
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
