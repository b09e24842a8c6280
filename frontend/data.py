"""What the pages fetch from the API, assembled: runs, their downsampled histories, and the live
curves bundle (figure, trace map, and where this tab's event stream starts)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import flask

from frontend import figures, logic, status
from frontend import smoothing as smoothing_
from frontend.api_client import ApiClient, ApiError, api_for
from frontend.auth_box import TOKEN_COOKIE

SERIES = ["train_loss", "val_loss", "accuracy", "bpc", "elapsed"]
HISTORY_POINTS = 1000  # per series: min/max buckets beyond this (the API keeps spikes)
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="normlab-fetch")


def api_base() -> str:
    return flask.current_app.config.get("NORMLAB_API_BASE", "") if flask.has_app_context() else ""


def api(token: str | None = None) -> ApiClient:
    """The API client acting for the browser's user: the token box's token when given, else the copy
    of it the browser sends as a cookie (so pages rendered on the server can read a private server)."""
    return api_for(api_base()).with_token(token or cookie_token())


def cookie_token() -> str | None:
    """The token box's token as the browser's cookie carries it (None outside a request, or none set)."""
    if not flask.has_request_context():
        return None
    return flask.request.cookies.get(TOKEN_COOKIE) or None


def fetch_runs(client: ApiClient, run_ids: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(runs found, ids not found), in the order asked; fetched concurrently."""

    def one(rid: str) -> dict[str, Any] | None:
        try:
            return client.run(rid)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    found = list(_pool.map(one, run_ids))
    return [r for r in found if r], [rid for rid, r in zip(run_ids, found, strict=True) if r is None]


def fetch_histories(client: ApiClient, runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    def one(run: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        try:
            return run["id"], client.metrics(run["id"], SERIES, HISTORY_POINTS)
        except ApiError:
            return run["id"], {"series": {}}

    return dict(_pool.map(one, runs))


def curves_bundle(
    run_ids: list[str],
    *,
    smoothing: float | None = None,
    color_by: str = "norm",
    x_mode: str = "step",
    panels: list[str] | None = None,
    present: bool = False,
    from_start: bool = False,
) -> dict[str, Any]:
    """Figure + trace map + watch for the runs: history first, then the stream picks up after it.

    The cursor is each run's last_seq read *before* its history, so nothing between the two is lost;
    points both in the history and on the stream are dropped in the browser by step. `smoothing`
    None: the browser's setting for Lab and Run (frontend/smoothing.py).
    """
    weight = smoothing_.cookie_weight() if smoothing is None else smoothing
    client = api()
    runs, missing = fetch_runs(client, run_ids)
    # runs of one colour group sit together in the legend and the chips
    other = "norm" if color_by == "batch_size" else "batch_size"
    runs.sort(
        key=lambda r: (str(r["spec"].get(color_by)), str(r["spec"].get(other)), r["spec"].get("seed", 0))
    )
    histories = fetch_histories(client, runs)
    fig, trace_map = figures.curves_figure(
        runs, histories, panels=panels, smoothing=weight, color_by=color_by, x_mode=x_mode, present=present
    )
    trace_map["id"] = uuid.uuid4().hex
    trace_map["from_start"] = from_start  # a redraw (smoothing) replays the same events (Run: probes)
    # the page appends live points only once the graph shows this very figure (assets/normlab.js)
    fig.setdefault("layout", {})["meta"] = {"normlab_map": trace_map["id"]}
    cursor = {r["id"]: 0 for r in runs} if from_start else logic.cursor_of(runs)
    return {
        "figure": fig,
        "map": trace_map,
        "runs": runs,
        "missing": missing,
        "watch": {"cursor": cursor, "api_base": api_base(), "terminal": status.TERMINAL},
    }
