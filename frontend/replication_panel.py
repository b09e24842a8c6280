"""A preset card's replication part: the "replicate on fresh seeds" button (`POST /api/presets/{name}` with
`{"fresh": 5}`: the server draws the seeds and records the draw) and, per claim, its verdict on the
declared seeds beside the latest fresh draw and the record over all draws
(`GET /api/presets/{name}/replications`). Kept apart from the card's layout (frontend/pages/presets.py)."""

from __future__ import annotations

from typing import Any

from dash import ALL, MATCH, Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.development.base_component import Component

from frontend import data, ids
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE

FRESH = 5  # seeds per fresh draw, as many as the declared design


def card_part(name: str) -> list[Component]:
    """The button and the record's box, for one preset card."""
    return [
        html.Button(
            f"Replicate on {FRESH} fresh seeds",
            id={"type": ids.PRESET_REPLICATE, "name": name},
            className="btn small",
            title="Seeds drawn now from a range no rule, margin or tuning ever saw (≥ 10000)",
        ),
        html.Div(id={"type": ids.PRESET_REPLICATION, "name": name}, className="replication", role="status"),
        dcc.Store(id={"type": ids.PRESET_REPLICATION_LIVE, "name": name}, data=False),
    ]


def page_part() -> list[Component]:
    """The page's store of draws launched here and the poll that refreshes their records."""
    return [
        dcc.Store(id=ids.PRESET_REPLICATING, data=[]),
        dcc.Interval(id=ids.PRESET_REPLICATION_POLL, interval=3000, disabled=True),
    ]


def _verdict(draw: dict[str, Any] | None) -> str:
    if draw is None:
        return "not run"
    return {True: "holds", False: "does not hold", None: "pending"}[draw.get("holds")]


def claim_line(c: dict[str, Any], declared_seeds: list[int]) -> str:
    """'declared seeds 0–4: holds · latest fresh draw (seeds …): does not hold · held on 1 of 2 draws'."""
    seeds = ",".join(map(str, declared_seeds))
    text = f"seeds {seeds}: {_verdict(c.get('declared_seeds'))}"
    latest = c.get("latest")
    if latest is None:
        return text + " · no fresh draw yet"
    text += f" · latest fresh draw (seeds {', '.join(map(str, latest['seeds']))}): {_verdict(latest)}"
    return (
        text + f" · held on {c['held']} of {c['judged']} judged fresh draw{'s' if c['judged'] != 1 else ''}"
    )


def record_box(rec: dict[str, Any] | None, problem: str = "") -> list[Component]:
    """One line per claim of the record; an exploratory claim says it needs a fresh draw to confirm."""
    if rec is None:
        return [html.Div(problem, className="muted")] if problem else []
    if not rec.get("claims"):  # never launched here: nothing to set a fresh draw beside yet
        return []
    out: list[Component] = [html.Div("Replication:", className="muted")]
    for c in rec.get("claims", []):
        tag = " (exploratory: confirmed only by holding on fresh seeds)" if c.get("exploratory") else ""
        out.append(
            html.Div(
                [html.Strong(c["claim"]), f"{tag}: ", claim_line(c, rec.get("declared_seeds", []))],
                className="muted replication-line",
            )
        )
    return out


def _running(rec: dict[str, Any] | None) -> bool:
    claims = (rec or {}).get("claims") or []
    return any((c.get("latest") or {}).get("holds", False) is None for c in claims)


def on_replicate(
    clicks: list[int | None], running: list[str] | None, token: str | None
) -> tuple[object, object]:
    """Launch a fresh draw of the clicked preset; its record then refreshes until the draw is judged."""
    if not ctx.triggered_id or not any(clicks):
        return no_update, no_update
    name = ctx.triggered_id["name"]
    try:
        data.api(token).launch_preset(name, fresh=FRESH)
    except ApiError as exc:
        return no_update, f"Could not replicate {name}: {exc.detail}"
    return sorted({*(running or []), name}), ""


def on_record(_n: int | None, running: list[str] | None, me: dict[str, str]) -> tuple[object, object]:
    """One card's record: once when the page opens, then while a draw launched here is being judged.

    One request per card, so each card fills in as its own record arrives: a preset with many launches
    (a slow record) holds up no other card."""
    name = me["name"]
    if ctx.triggered_id is not None and name not in (running or []):
        return no_update, no_update
    try:
        rec = data.api().replications(name)
    except ApiError as exc:  # an API without the route (an older server) shows no record
        return ([] if exc.status in (404, 405) else record_box(None, exc.detail)), False
    return record_box(rec), name in (running or []) and _running(rec)


def on_live(live: list[bool | None]) -> bool:
    """The records' poll runs while any card's draw launched here is still being judged."""
    return not any(live)


def register(app: Dash) -> None:
    """The part's callbacks on `app` (frontend/app.py's create_app calls this for every app it builds)."""
    app.callback(
        Output(ids.PRESET_REPLICATING, "data"),
        Output(ids.PRESET_MESSAGE, "children", allow_duplicate=True),
        Input({"type": ids.PRESET_REPLICATE, "name": ALL}, "n_clicks"),
        State(ids.PRESET_REPLICATING, "data"),
        State(TOKEN_STORE, "data"),
        prevent_initial_call=True,
    )(on_replicate)
    app.callback(
        Output({"type": ids.PRESET_REPLICATION, "name": MATCH}, "children"),
        Output({"type": ids.PRESET_REPLICATION_LIVE, "name": MATCH}, "data"),
        Input(ids.PRESET_REPLICATION_POLL, "n_intervals"),
        Input(ids.PRESET_REPLICATING, "data"),
        State({"type": ids.PRESET_REPLICATION, "name": MATCH}, "id"),
    )(on_record)
    app.callback(
        Output(ids.PRESET_REPLICATION_POLL, "disabled"),
        Input({"type": ids.PRESET_REPLICATION_LIVE, "name": ALL}, "data"),
    )(on_live)
