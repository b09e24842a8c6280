"""Forks on the Run page and the Lab's live card: click a curve point to fill "fork from step k", change
the normalizer, lr, batch size, steps or seed, and the child starts — on the Run page its page opens,
drawn on one chart with its family; on the Lab it joins the board — ; a lineage strip (parent,
siblings, children); "change now" controls (lr, weight decay) for a running run.
Intervention markers on the curves are drawn in the browser (assets/fork.js)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update
from dash.development.base_component import Component

from frontend import data, ids
from frontend.api_client import ApiError, attempt
from frontend.auth_box import TOKEN_STORE

NORMS = ["none", "layer", "rms", "batch", "weight"]


def family_ids(run: dict[str, Any]) -> list[str]:
    """The runs drawn on this run's chart: its family tree (itself first when it has none)."""
    try:
        family = data.api().lineage(run["id"]).get("family") or []
    except ApiError:
        family = []
    return family if run["id"] in family else [run["id"], *family]


def _number(id_: str, value: Any, step: Any = "any", minimum: float | None = None) -> dcc.Input:
    return dcc.Input(
        id=id_, type="number", value=value, step=step, min=minimum, debounce=True, className="num"
    )


def fork_card(run: dict[str, Any] | None) -> html.Div:
    """The fork form, prefilled with the run's own values (Run page: the child's page opens) or empty
    (the Lab's live card: the clicked curve's run is forked, its values kept where a field is left
    empty, and the child joins the board); the step and the run come from a click on a curve."""
    spec = (run or {}).get("spec", {})
    # until a click picks one: the run's own cadence, or its middle when the engine chose the cadence
    first = spec.get("checkpoint_every") or (spec["steps"] // 2 if spec.get("steps") else None)
    fields = [
        ("Fork from step", _number(ids.FORK_STEP, first, 1, 0)),
        (
            "Normalizer",
            dcc.Dropdown(id=ids.FORK_NORM, options=NORMS, value=spec.get("norm"), clearable=False),
        ),
        ("Learning rate", _number(ids.FORK_LR, spec.get("lr"))),
        ("Batch size", _number(ids.FORK_BATCH, spec.get("batch_size"), 1, 1)),
        ("Steps", _number(ids.FORK_STEPS, spec.get("steps"), 1, 1)),
        ("Seed (data order from the fork on)", _number(ids.FORK_SEED, spec.get("seed"), 1, 0)),
    ]
    return html.Div(
        className="card fork",
        children=[
            html.H2("What if… fork this run"),
            html.P(
                "Click a point of a curve to pick the step; the child continues from the run's state "
                "at exactly that step, with your changes (bit for bit on the CPU; on a GPU close to the "
                "run, not bit for bit).",
                className="muted",
            ),
            html.Div(className="fork-fields", children=[html.Label([text, field]) for text, field in fields]),
            html.Button("Fork", id=ids.FORK_GO, className="btn"),
            html.Span(id=ids.FORK_MESSAGE, className="message", role="status"),
            dcc.Store(id=ids.FORK_LOCATION),  # the child's page, opened by the browser (below)
            html.Span(id=ids.FORK_SINK, hidden=True),
            dcc.Store(id=ids.FORK_RUN, data=(run or {}).get("id")),
            dcc.Store(id=ids.FORK_OPENS, data=run is not None),
            dcc.Store(id=ids.FORK_CHILD),
        ],
    )


def change_card(run: dict[str, Any] | None) -> html.Div:
    """lr / weight decay "change now" for a running run (Run page: hidden once it has ended), or on the
    Lab's live card for the run whose curve was clicked last (the fork form's run)."""
    spec = (run or {}).get("spec", {})
    shown = run is None or run.get("status") in ("running", "queued")
    return html.Div(
        className="card change-now",
        style={} if shown else {"display": "none"},
        children=[
            html.H2("Change now"),
            *([] if run else [html.P("Click a curve of a running run, then apply.", className="muted")]),
            html.Label(["Learning rate", _number(ids.CHANGE_LR, spec.get("lr"))]),
            html.Label(["Weight decay", _number(ids.CHANGE_WD, spec.get("weight_decay"), "any", 0)]),
            html.Button("Apply at the next step", id=ids.CHANGE_GO, className="btn small"),
            html.Span(id=ids.CHANGE_MESSAGE, className="message", role="status"),
            dcc.Store(id=ids.CHANGE_RUN, data=(run or {}).get("id")),
        ],
    )


def lineage_strip(run: dict[str, Any]) -> html.Div:
    """Parent, siblings and children as links (empty for a run that is nobody's fork and has none)."""
    try:
        lin = data.api().lineage(run["id"])
    except ApiError:
        return html.Div(id=ids.LINEAGE)
    parts: list[Any] = []
    if lin.get("parent"):
        p = lin["parent"]
        verb = "resumed" if p.get("kind") == "resume" else "forked"
        parts.append(
            html.Span([f"{verb} from ", dcc.Link(p["id"], href=f"/run/{p['id']}"), f" at step {p['step']}"])
        )
    for name, runs in (("siblings", lin.get("siblings") or []), ("children", lin.get("children") or [])):
        if runs:
            links = [
                dcc.Link(f"{c['id']} ({c['norm']}, step {c['step']})", href=f"/run/{c['id']}") for c in runs
            ]
            parts.append(html.Span([f"{name}: ", *_joined(links)]))
    if len(lin.get("family") or []) > 1:
        root = lin["family"][0]
        parts.append(dcc.Link("Compare the family →", href=f"/compare?family={root}", className="btn small"))
    return html.Div(id=ids.LINEAGE, className="lineage", children=parts)


def _joined(items: Sequence[Component | str]) -> list[Component | str]:
    out: list[Component | str] = []
    for i, item in enumerate(items):
        out += [", "] if i else []
        out.append(item)
    return out


def on_fork_run(run_id: str | None, token: str | None) -> tuple[object, ...]:
    """A click picked the run to fork (the Lab's card starts empty; on a Run page, a family member):
    the form shows that run's own values, so what is changed is what differs from them."""
    if not run_id:
        return (no_update,) * 5
    try:
        spec = data.api(token).run(run_id).get("spec", {})
    except ApiError:
        return (no_update,) * 5
    return tuple(spec.get(k) for k in ("norm", "lr", "batch_size", "steps", "seed"))


def fork_changes(
    run: dict[str, Any],
    norm: str | None,
    lr: float | None,
    batch_size: int | None,
    steps: int | None,
    seed: int | None,
) -> dict[str, Any]:
    """The fork's changes: the form's values that differ from the run's own."""
    spec = run.get("spec", {})
    values = {"norm": norm, "lr": lr, "batch_size": batch_size, "steps": steps, "seed": seed}
    return {k: v for k, v in values.items() if v is not None and v != spec.get(k)}


def on_fork(
    _n: int | None,
    opens: bool | None,
    run_id: str | None,
    step: int | float | None,
    norm: str | None,
    lr: float | None,
    batch_size: int | None,
    steps: int | None,
    seed: int | None,
    token: str | None,
) -> tuple[object, object, object]:
    if step is None or not run_id:
        return "Pick a run and a step: click a point of a curve.", no_update, no_update
    try:
        client = data.api(token)
        changes = fork_changes(client.run(run_id), norm, lr, batch_size, steps, seed)
        made = client.fork(run_id, int(step), changes)
    except ApiError as exc:
        return exc.detail, no_update, no_update
    if opens:
        return (
            f"Forked after step {made['from_step']}: opening {made['id']}…",
            f"/run/{made['id']}",
            no_update,
        )
    return f"Forked after step {made['from_step']}: {made['id']} joins the board.", no_update, made["id"]


def on_change_now(
    _n: int | None,
    page_run: str | None,
    clicked_run: str | None,
    lr: float | None,
    weight_decay: float | None,
    token: str | None,
) -> str:
    run_id = page_run or clicked_run  # the Run page's run; on the Lab, the clicked curve's
    if not run_id:
        return "Pick the run: click a point of its curve."
    changes = {k: v for k, v in (("lr", lr), ("weight_decay", weight_decay)) if v is not None}
    return attempt(
        lambda: data.api(token).intervene(run_id, changes),
        "Asked: the run changes at its next step (a marker shows where).",
    )


def register(app: Dash) -> None:
    """This module's callbacks on `app` (frontend/app.py's create_app calls this for every app it builds)."""
    app.callback(
        Output(ids.FORK_NORM, "value"),
        Output(ids.FORK_LR, "value"),
        Output(ids.FORK_BATCH, "value"),
        Output(ids.FORK_STEPS, "value"),
        Output(ids.FORK_SEED, "value"),
        Input(ids.FORK_RUN, "data"),
        State(TOKEN_STORE, "data"),
        prevent_initial_call=True,
    )(on_fork_run)
    app.callback(
        Output(ids.FORK_MESSAGE, "children"),
        Output(ids.FORK_LOCATION, "data"),
        Output(ids.FORK_CHILD, "data"),
        Input(ids.FORK_GO, "n_clicks"),
        State(ids.FORK_OPENS, "data"),
        State(ids.FORK_RUN, "data"),
        State(ids.FORK_STEP, "value"),
        State(ids.FORK_NORM, "value"),
        State(ids.FORK_LR, "value"),
        State(ids.FORK_BATCH, "value"),
        State(ids.FORK_STEPS, "value"),
        State(ids.FORK_SEED, "value"),
        State(TOKEN_STORE, "data"),
        prevent_initial_call=True,
    )(on_fork)
    app.callback(
        Output(ids.CHANGE_MESSAGE, "children"),
        Input(ids.CHANGE_GO, "n_clicks"),
        State(ids.CHANGE_RUN, "data"),
        State(ids.FORK_RUN, "data"),
        State(ids.CHANGE_LR, "value"),
        State(ids.CHANGE_WD, "value"),
        State(TOKEN_STORE, "data"),
        prevent_initial_call=True,
    )(on_change_now)
    # The clicked point's step (its hover data carries [step, wall time, value] in either x mode) and the
    # run its trace belongs to (the trace's legend group), read in the browser: no figure round trip.
    app.clientside_callback(  # type: ignore[no-untyped-call]  # unannotated in Dash
        """function (click) {
            var p = click && click.points && click.points[0];
            if (!p) { return [window.dash_clientside.no_update, window.dash_clientside.no_update]; }
            var gd = document.querySelector('#nl-curves .js-plotly-plot');
            var trace = gd && gd.data && gd.data[p.curveNumber];
            var step = Array.isArray(p.customdata) ? p.customdata[0] : p.x;
            return [Math.round(step), (trace && trace.legendgroup) || window.dash_clientside.no_update];
        }""",
        Output(ids.FORK_STEP, "value"),
        Output(ids.FORK_RUN, "data"),
        Input(ids.CURVES, "clickData"),
        prevent_initial_call=True,
    )
    # A full load of the child's page (its chart is its family's); through the browser, because the page's
    # own URL state (smoothing, panels) is written to the location and would win over a Location update.
    app.clientside_callback(  # type: ignore[no-untyped-call]  # unannotated in Dash
        """function (href) {
            if (href) { window.location.assign(href); }
            return window.dash_clientside.no_update;
        }""",
        Output(ids.FORK_SINK, "children"),
        Input(ids.FORK_LOCATION, "data"),
        prevent_initial_call=True,
    )
