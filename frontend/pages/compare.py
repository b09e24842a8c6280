"""Compare: overlay any runs; EMA smoothing; colour by normalizer or batch size; x by step or wall time.

The URL carries it all (runs, smooth, color, x, panels), so a link reproduces the view. The browser
writes the URL the moment a control changes (a clientside callback, assets/normlab.js `compareUrl`),
not after the server has rebuilt the figure, and keeps the last comparison (localStorage): Compare
opened without runs (the nav link) shows it again."""

from __future__ import annotations

from typing import Any

import dash
from dash import ClientsideFunction, Input, Output, State, callback, clientside_callback, dcc, html
from dash.development.base_component import Component

from frontend import components, data, figures, fork_view, group_view, ids, logic
from frontend.api_client import ApiClient, ApiError
from normlab_client.group_models import GroupPublic


def run_options(
    client: ApiClient, selected: list[dict[str, Any]], live: dict[str, str] | None = None
) -> list[dict[str, str]]:
    """The run picker's options: the chosen runs first, then the newest 200; each label says the run's
    status as the API (or, fresher, the tab's stream in `live`) reports it now."""
    try:
        recent = client.runs(limit=200)["items"]
    except ApiError:
        recent = []
    fresh = {r["id"]: r for r in recent}
    seen, out = set(), []
    for r in [fresh.get(r["id"], r) for r in selected] + recent:
        if r["id"] not in seen:
            seen.add(r["id"])
            state = (live or {}).get(r["id"]) or r["status"]
            out.append({"label": f"{figures.run_label(r)} · {state} · {r['id'][:8]}", "value": r["id"]})
    return out


def load_group(group_id: str | None) -> tuple[GroupPublic | None, str]:
    """(the group as GET /api/groups/{id} answers, problem message or '')."""
    if not group_id:
        return None, ""
    try:
        return data.api().group(group_id), ""
    except ApiError as exc:
        return None, f"Group {group_id}: {exc.detail}"


def group_box(group: GroupPublic | None, problem: str, present: bool) -> list[Component]:
    if group is None:
        return [components.error_box(problem)] if problem else []
    return group_view.group_card(group, ids.GROUP_IDS, present)


def layout(
    runs: str | list[str] | None = None,
    smooth: str | None = None,
    color: str | None = None,
    x: str | None = None,
    panels: str | None = None,
    present: str | None = None,
    group: str | None = None,
    family: str | None = None,
    **_: str,
) -> html.Div:
    present_on = logic.is_present({"present": present})
    if family and not runs:  # a fork's family: the tree's runs (frontend/fork_view.py)
        runs = ",".join(fork_view.family_ids({"id": str(family)}))
    group_data, problem = load_group(group)
    whole_group = bool(group_data and not runs)
    if group_data and not runs:  # a group's link: all its runs (seeds × arms), bands and verdicts
        runs = [r.id for r in group_data.runs]
    state = logic.compare_state(
        {"runs": runs, "smooth": smooth, "color": color, "x": x, "panels": panels},
        max_runs=logic.MAX_GROUP_RUNS if whole_group else logic.MAX_RUNS,
    )
    try:
        bundle = data.curves_bundle(
            state["runs"],
            smoothing=state["smooth"],
            color_by=state["color"],
            x_mode=state["x"],
            panels=state["panels"],
            present=present_on,
        )
        options = run_options(data.api(), bundle["runs"])
    except ApiError as exc:
        return html.Div([components.error_box(exc.detail), *components.page_stores()])
    missing = bundle["missing"]
    found = [rid for rid in state["runs"] if rid not in missing]  # the link's order, not the legend's
    controls = components.card(
        "Compare",
        className="controls",
        children=[
            html.Div(
                className="field wide",
                children=[
                    html.Label("Runs", className="label"),
                    dcc.Dropdown(
                        id=ids.CMP_RUNS,
                        options=options,
                        value=found,
                        multi=True,
                        placeholder="Pick runs to overlay",
                    ),
                ],
            ),
            html.Div(
                className="control-row",
                children=[
                    html.Div(
                        className="field",
                        children=[
                            html.Label("Smoothing (EMA)", className="label"),
                            dcc.Slider(
                                id=ids.CMP_SMOOTH,
                                min=0,
                                max=0.99,
                                step=0.01,
                                value=state["smooth"],
                                marks={0: "0", 0.5: "0.5", 0.9: "0.9", 0.99: "0.99"},
                                tooltip={"placement": "bottom", "always_visible": False},
                            ),
                        ],
                    ),
                    html.Div(
                        className="field",
                        children=[
                            html.Label("Colour by", className="label"),
                            dcc.RadioItems(
                                id=ids.CMP_COLOR,
                                value=state["color"],
                                inline=True,
                                options=[
                                    {"label": " normalizer", "value": "norm"},
                                    {"label": " batch size", "value": "batch_size"},
                                ],
                            ),
                        ],
                    ),
                    html.Div(
                        className="field",
                        children=[
                            html.Label("x-axis", className="label"),
                            dcc.RadioItems(
                                id=ids.CMP_X,
                                value=state["x"],
                                inline=True,
                                options=[
                                    {"label": " step", "value": "step"},
                                    {"label": " wall time", "value": "time"},
                                ],
                            ),
                        ],
                    ),
                    html.Div(
                        className="field",
                        children=[
                            html.Label("Panels", className="label"),
                            dcc.Checklist(
                                id=ids.CMP_PANELS,
                                value=state["panels"],
                                inline=True,
                                options=[
                                    {"label": " training loss", "value": "loss"},
                                    {"label": " validation loss", "value": "val"},
                                    {"label": " metric", "value": "metric"},
                                ],
                            ),
                        ],
                    ),
                ],
            ),
            html.Div(
                id=ids.CMP_MESSAGE,
                className="message error" if missing else "message",
                children=f"Not found (deleted?): {', '.join(missing)}" if missing else "",
            ),
        ],
    )
    return html.Div(
        className="compare-page",
        children=[
            controls,
            html.Div(
                id=ids.CMP_GROUP_BOX,
                className="card group-card",
                style={} if group else {"display": "none"},
                children=group_box(group_data, problem, present_on),
            ),
            dcc.Store(id=ids.CMP_GROUP, data=group or None),
            dcc.Interval(
                id=ids.CMP_GROUP_POLL, interval=3000, disabled=group_data is None or group_data.done
            ),
            html.Div(
                className="card",
                children=[
                    html.Div(
                        id="cmp-legend",
                        className="run-list",
                        children=components.run_chips(bundle["runs"], state["color"]),
                    ),
                    dcc.Store(id="cmp-runs-data", data={"runs": bundle["runs"], "color": state["color"]}),
                    *components.curves_graph(bundle["figure"], bundle["map"]),
                ],
            ),
            # an empty Compare leaves the URL alone: it may open the last comparison (compareRestore)
            *components.page_stores(
                bundle["watch"], {**state, "runs": found, "group": group} if state["runs"] else None
            ),
            *(
                [
                    dcc.Location(id=ids.CMP_GO, refresh="callback-nav"),
                    dcc.Store(id=ids.CMP_RESTORE, data=True),
                ]
                if not state["runs"]
                else []
            ),
        ],
    )


@callback(
    Output(ids.CURVES, "figure", allow_duplicate=True),
    Output(ids.CURVES_MAP, "data", allow_duplicate=True),
    Output(ids.WATCH, "data", allow_duplicate=True),
    Output("cmp-runs-data", "data"),
    Output(ids.CMP_MESSAGE, "children"),
    Input(ids.CMP_RUNS, "value"),
    Input(ids.CMP_SMOOTH, "value"),
    Input(ids.CMP_COLOR, "value"),
    Input(ids.CMP_X, "value"),
    Input(ids.CMP_PANELS, "value"),
    State(ids.PRESENT, "data"),  # State: its update on page load must not rebuild the figure twice
    prevent_initial_call=True,
)
def on_view_change(
    runs: list[str] | None,
    smooth: float | None,
    color: str | None,
    x: str | None,
    panels: list[str] | None,
    present: bool | None,
) -> tuple[object, ...]:
    state = logic.compare_state(  # the picker may hold a whole group's runs (layout above)
        {"runs": runs or [], "smooth": smooth, "color": color, "x": x, "panels": panels},
        max_runs=logic.MAX_GROUP_RUNS,
    )
    try:
        bundle = data.curves_bundle(
            state["runs"],
            smoothing=state["smooth"],
            color_by=state["color"],
            x_mode=state["x"],
            panels=state["panels"],
            present=bool(present),
        )
    except ApiError as exc:
        return (dash.no_update,) * 4 + (exc.detail,)
    missing = bundle["missing"]
    return (
        bundle["figure"],
        bundle["map"],
        bundle["watch"],
        {"runs": bundle["runs"], "color": state["color"]},
        f"Not found (deleted?): {', '.join(missing)}" if missing else "",
    )


# The URL (and the remembered comparison) follow the controls at once, in the browser.
clientside_callback(
    ClientsideFunction("normlab", "compareUrl"),
    Output(ids.URL_STATE, "data", allow_duplicate=True),
    Input(ids.CMP_RUNS, "value"),
    Input(ids.CMP_SMOOTH, "value"),
    Input(ids.CMP_COLOR, "value"),
    Input(ids.CMP_X, "value"),
    Input(ids.CMP_PANELS, "value"),
    State(ids.CMP_GROUP, "data"),
    prevent_initial_call="initial_duplicate",
)
clientside_callback(
    ClientsideFunction("normlab", "compareRestore"),
    Output(ids.CMP_GO, "href"),
    Input(ids.CMP_RESTORE, "data"),
)


@callback(
    Output("cmp-legend", "children"),
    Output(ids.CMP_RUNS, "options"),
    Input("cmp-runs-data", "data"),
    Input(ids.LIVE_STATUS, "data"),
    prevent_initial_call=True,
)
def on_legend(
    runs_data: dict[str, Any] | None, live: dict[str, str] | None
) -> tuple[list[html.Div], list[dict[str, str]]]:
    """Chips and picker labels with the statuses the stream reports (a run that ended says so)."""
    runs_data = runs_data or {}
    runs = runs_data.get("runs", [])
    chips = components.run_chips(runs, runs_data.get("color", "norm"), live)
    return chips, run_options(data.api(), runs, live)


@callback(
    Output(ids.CMP_GROUP_BOX, "children"),
    Output(ids.CMP_GROUP_POLL, "disabled"),
    Input(ids.CMP_GROUP_POLL, "n_intervals"),
    State(ids.CMP_GROUP, "data"),
    State(ids.PRESENT, "data"),
    prevent_initial_call=True,
)
def on_group_poll(_n: int | None, group_id: str | None, present: bool | None) -> tuple[object, bool]:
    """The group's verdicts, bands and table as its runs finish; the polling stops once all ended."""
    group, problem = load_group(group_id)
    if group is None and not problem:
        return dash.no_update, True
    return group_box(group, problem, bool(present)), group is None or group.done


dash.register_page(  # type: ignore[no-untyped-call]  # dash's register_page is unannotated
    __name__, path="/compare", name="Compare", title="normlab · Compare", order=2
)
