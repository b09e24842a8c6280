"""GET /api/runs/{id}/scalars: a run's every `scalars` event at full resolution, paged by sequence number.

The downsampled `/metrics` is for drawing; this is for analysis (`normlab_client`'s `Run.metrics()`):
the same rows as the raw CSV export, as JSON columns, resumable from any `after=`.
"""

from __future__ import annotations

import json
import math

import anyio
from fastapi import APIRouter, Query
from fastapi.responses import Response

from backend.deps import StoreDep, get_run_or_404
from normlab.store import RunRow, Store
from normlab.store.rollup import SCALAR_NAMES
from normlab_client.api_models import ErrorDetail
from normlab_client.metrics_models import ScalarsPage

router = APIRouter(prefix="/api/runs", tags=["runs"])
MAX_PAGE = 50_000


def _cell(v: float | None) -> float | str | None:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def scalars_page(store: Store, run: RunRow, after: int, limit: int) -> bytes:
    """The page as JSON bytes (built by hand: pydantic would re-validate every float of the page)."""
    rows = store.events_after(run["id"], after, limit, kind="scalars")
    # one parse of every payload at once: the stored texts are JSON objects already
    payloads = json.loads("[" + ",".join(r.payload for r in rows) + "]")
    columns = {n: [p.get(n) for p in payloads] for n in SCALAR_NAMES}
    body = {
        "run_id": run["id"],
        "seq": [r.seq for r in rows],
        "step": [r.step for r in rows],
        "time": [r.time for r in rows],
        "values": columns,
        "next_after": rows[-1].seq if len(rows) == limit else None,
        "last_seq": int(run["last_seq"]),
    }
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:  # a NaN or an infinity (a diverged run): sent as strings, see ScalarsPage
        body["values"] = {n: [_cell(v) for v in column] for n, column in columns.items()}
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()


@router.get(
    "/{run_id}/scalars",
    response_model=ScalarsPage,
    responses={404: {"model": ErrorDetail}, 422: {"model": ErrorDetail}},
)
async def scalars(
    run_id: str,
    store: StoreDep,
    after: int = Query(0, ge=0, le=10**12, description="Only events with a larger sequence number."),
    limit: int = Query(10_000, ge=1, le=MAX_PAGE, description="At most this many events."),
) -> Response:
    """Every `scalars` event after `after`, in order, never downsampled; follow `next_after` for more."""
    run = await anyio.to_thread.run_sync(get_run_or_404, store, run_id)
    body = await anyio.to_thread.run_sync(scalars_page, store, run, after, limit)
    return Response(body, media_type="application/json")
