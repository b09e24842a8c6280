"""Presets: the paper's figures as a gallery. One click launches a preset over its seeds as one group
(`POST /api/presets/{name}`); its card then shows the verdict live (`GET /api/groups/{id}`: each claim,
whether it held on every seed, the effect ± its standard error, the rule) and links to Compare, which
draws mean ± std bands per cell. The launches are remembered in the browser, so the verdicts are still
there after navigating away and back; the server also remembers each preset's latest launch, so a fresh
browser (a colleague's, the talk's laptop) shows its verdict, its bands and the link to it too. Each card
also offers a replication on fresh seeds and shows its record (frontend/replication_panel.py)."""

from __future__ import annotations

from typing import Any

import dash
from dash import ALL, Input, Output, State, callback, ctx, dcc, html, no_update
from dash.development.base_component import Component

from frontend import (
    components,
    data,
    figures,
    group_view,
    ids,
    judged_figure,
    logic,
    map_figure,
    replication_panel,
    smoothing,
)
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE
from normlab_client.group_models import GroupPublic, PresetEstimate


def preset_card(p: dict[str, Any]) -> html.Div:
    chips = [
        html.Span(
            [
                html.Span(className="swatch", style={"background": figures.norm_color(r.get("norm", ""))}),
                label,
            ],
            className="chip",
        )
        for r, label in zip(p["runs"], p.get("labels") or [r.get("norm") for r in p["runs"]], strict=False)
    ]
    seeds = p.get("seeds") or [0]
    return html.Div(
        className="preset card",
        children=[
            html.H3(p["title"]),
            html.Div(p.get("paper_ref", ""), className="muted"),
            html.P(p.get("shows", ""), className="shows"),
            html.Div(chips, className="chips"),
            html.Div(f"Expect: {p['expect']}" if p.get("expect") else "", className="expect"),
            setup_details(p),
            html.Div(estimate_text(p), className="muted estimate"),
            html.Button(
                f"Start {len(p['runs'])} runs × {len(seeds)} seeds",
                id={"type": ids.PRESET_START, "name": p["name"]},
                className="btn primary",
            ),
            html.Div(
                id={"type": ids.PRESET_VERDICT, "name": p["name"]}, className="verdict-box", role="status"
            ),
            *replication_panel.card_part(p["name"]),
        ],
    )


def estimate_text(p: dict[str, Any]) -> str:
    """The card's duration line before Start, from the server's measured run times of earlier launches
    (`GET /api/presets` "estimate", normlab.estimates), or "no estimate yet" when none was measured."""
    runs = len(p["runs"]) * len(p.get("seeds") or [0])
    found = p.get("estimate")
    if not found:
        return f"Duration here: no estimate yet (none of its runs has completed on this server); {runs} runs."
    est = PresetEstimate.model_validate(found)
    per_run = smoothing.format_elapsed(est.run_s)
    one = components.format_wait(est.one_worker_s)
    one = one if one.startswith("under") else f"about {one}"
    text = f"Duration here: {one} on one worker ({runs} runs, median {per_run} each"
    text += f", from {est.measured} timed run{'s' if est.measured != 1 else ''})"
    if est.last_launch_s is not None:
        text += f"; the last full launch took {smoothing.format_elapsed(est.last_launch_s)} here"
    return text + "."


def setup_details(p: dict[str, Any]) -> html.Details | str:
    """The setup here beside the paper's, and the tuning rule `normlab reproduce --tune` applies, folded."""
    tuning = p.get("tuning")
    if not p.get("setup") and not tuning:
        return ""
    return html.Details(
        [
            html.Summary("Setup here and in the paper"),
            html.P(p.get("setup") or "", className="setup"),
            html.P(
                f"Tuning rule (normlab reproduce {p['name']} --tune): {tuning['rule']}.", className="muted"
            )
            if tuning
            else "",
        ],
        className="preset-setup",
    )


SECTIONS = (
    ("paper", "The paper's experiments"),
    ("map", "Where does it help? One comparison along a scale"),
    ("modern", "Modern findings"),
)


def section_of(p: dict[str, Any]) -> str:
    """'map', 'modern' or 'paper' (the default): where a preset's card is grouped on the page."""
    tags = p.get("tags") or []
    return "map" if "map" in tags or p.get("map") else "modern" if "modern" in tags else "paper"


def gallery(presets: list[dict[str, Any]]) -> list[Component]:
    """The cards grouped by section (paper experiments, maps, modern findings), each under its heading."""
    out: list[Component] = []
    for key, title in SECTIONS:
        cards = [preset_card(p) for p in presets if section_of(p) == key]
        if cards:
            out += [html.H3(title, className="preset-section"), html.Div(cards, className="gallery")]
    return out


def layout(present: str | None = None, **_: str) -> html.Div:
    try:
        presets = data.api().presets()
    except ApiError as exc:
        return html.Div([components.error_box(exc.detail), *components.page_stores()])
    return html.Div(
        className="presets-page",
        children=[
            html.H2("The paper's figures, ready to run"),
            html.Div(id=ids.PRESET_MESSAGE, className="message", role="status"),
            *gallery(presets),
            dcc.Location(id=ids.PRESET_GO, refresh="callback-nav"),
            dcc.Store(id=ids.PRESET_GROUPS, storage_type="local"),
            dcc.Store(id=ids.PRESET_LATEST, data=latest_launches(presets)),
            dcc.Store(id=ids.PRESET_PRESENT, data=logic.is_present({"present": present})),
            dcc.Interval(id=ids.PRESET_POLL, interval=2000, disabled=True),
            *replication_panel.page_part(),
            *components.page_stores(),
        ],
    )


def latest_launches(presets: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{preset: {"group": id, "runs": []}} of each preset's latest launch on the server (any browser's)."""
    return {p["name"]: {"group": p["latest_group"], "runs": []} for p in presets if p.get("latest_group")}


def start_preset(preset: dict[str, Any], token: str | None = None) -> tuple[list[str], str]:
    """POST each of the preset's runs once per seed (an API without the presets route); (run ids, problem)."""
    run_ids, problems = [], []
    for seed in preset.get("seeds") or [None]:
        for spec in preset["runs"]:
            try:
                body = spec if seed is None else {**spec, "seed": seed}
                run_ids.append(data.api(token).create_run(body)["id"])
            except ApiError as exc:
                problems.append(exc.detail)
    return run_ids, "; ".join(problems)


def launch(name: str, token: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """({"group": id, "runs": [...]}, problem): the preset as one group; on an API that predates
    `POST /api/presets/{name}` (404 or 405), the runs one by one, without a group."""
    try:
        launched = data.api(token).launch_preset(name)
        return {"group": launched["group_id"], "runs": launched["run_ids"]}, ""
    except ApiError as exc:
        # the names come from the API's own list, so a 404/405 here means the route is missing
        if exc.status not in (404, 405):
            return None, f"Could not start {name}: {exc.detail}"
    presets = {p["name"]: p for p in data.api(token).presets()}
    run_ids, problem = start_preset(presets[name], token)
    return ({"group": None, "runs": run_ids} if run_ids else None), problem


@callback(
    Output(ids.PRESET_GROUPS, "data"),
    Output(ids.PRESET_MESSAGE, "children"),
    Input({"type": ids.PRESET_START, "name": ALL}, "n_clicks"),
    State(ids.PRESET_GROUPS, "data"),
    State(TOKEN_STORE, "data"),
    prevent_initial_call=True,
)
def on_start(
    clicks: list[int | None], launches: dict[str, dict[str, Any]] | None, token: str | None
) -> tuple[object, object]:
    if not ctx.triggered_id or not any(clicks):
        return no_update, no_update
    name = ctx.triggered_id["name"]
    launched, problem = launch(name, token)
    if launched is None:
        return no_update, problem or f"Could not start {name}."
    return {**(launches or {}), name: launched}, problem


def verdict_box(
    launched: dict[str, Any], group: GroupPublic | None, problem: str = "", present: bool = False
) -> list[Component]:
    """A card's live part: the group's verdicts and progress, and where to watch the curves."""
    gid, runs = launched.get("group"), launched.get("runs") or []
    href = "/compare" + logic.encode_query({"group": gid} if gid else {"runs": runs})
    text = "Per-seed curves and bands in Compare →" if gid else f"Compare these {len(runs)} runs →"
    link = dcc.Link(text, href=href, className="btn small compare-link")
    if group is None:
        return [html.Div(problem or f"Started {len(runs)} runs.", className="muted"), link]
    return [*judged_graphs(group, present), *group_view.verdicts(group, expect=False), link]


def judged_graphs(group: GroupPublic, present: bool = False) -> list[Component]:
    """What the card draws: the quantity its claims judge. A map: Δ per axis value; a claim on a
    hidden-state figure (η·λ_max, the angular update, …): that figure per arm, seeds, mean and its
    interval beside the claim's line (frontend/judged_figure.py); a claim on the final metric or its
    curve: the metric's mean ± std bands along training. `present`: sized for a projector."""
    if group.map is not None:
        return [map_figure.map_graph(group.map, present)]
    # fixed heights, so the card grows by exactly the plots (a responsive plot sized itself after the
    # card had been laid out, and ran over the card below)
    config: dcc.Graph.Config = {**components.GRAPH_CONFIG, "responsive": False}
    keys = judged_figure.trace_keys(group)
    out: list[Component] = [group_view.judged_graph(group, key, present) for key in keys]
    if judged_figure.draws_bands(group):
        height = 300
        shown = height + (120 if present else 0)  # figures.apply_theme's presentation height
        out.insert(
            0,
            dcc.Graph(
                figure=group_view.band_figure(group, present, height=height),
                config=config,
                style={"height": f"{shown}px"},
                className="preset-bands",
            ),
        )
    return out


@callback(
    Output({"type": ids.PRESET_VERDICT, "name": ALL}, "children"),
    Output(ids.PRESET_POLL, "disabled"),
    Input(ids.PRESET_POLL, "n_intervals"),
    Input(ids.PRESET_GROUPS, "data"),
    State(ids.PRESET_LATEST, "data"),
    State(ids.PRESET_PRESENT, "data"),
)
def on_poll(
    _n: int | None,
    launches: dict[str, dict[str, Any]] | None,
    latest: dict[str, dict[str, Any]] | None,
    present: bool | None = False,
) -> tuple[list[object], bool]:
    """Every launched preset's verdict as its runs finish (this browser's launch, else the server's
    latest); the polling stops once every group ended."""
    names = [o["id"]["name"] for o in ctx.outputs_list[0]]
    out: list[object] = []
    live = False
    for name in names:
        launched = (launches or {}).get(name) or (latest or {}).get(name)
        if not launched:
            out.append(no_update)
            continue
        group, problem = None, ""
        if launched.get("group"):
            try:
                group = data.api().group(launched["group"])
            except ApiError as exc:
                problem = exc.detail
            live = live or (group is not None and not group.done)
        out.append(verdict_box(launched, group, problem, bool(present)))
    return out, not live


dash.register_page(  # type: ignore[no-untyped-call]  # dash's register_page is unannotated
    __name__, path="/presets", name="Presets", title="normlab · Presets", order=3
)
