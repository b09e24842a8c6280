"""GET /api/groups/{group_id}: a preset's or sweep's runs, arms (mean ± std, mean ± band curves), claims."""

from __future__ import annotations

import json
import logging

from fastapi import APIRouter, HTTPException, Query

from backend.deps import StoreDep
from normlab.claims import CURVE_FIELD
from normlab.groups import summarize
from normlab.store import Store
from normlab_client.api_models import ErrorDetail
from normlab_client.group_models import GroupPublic, StoredGroupError

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api", tags=["groups"])
MAX_GROUP_RUNS = 1000
METRICS = sorted({"val_loss", "accuracy", "bpc", "mse"} | set(CURVE_FIELD))


def _curve(store: Store, run_id: str, field: str) -> list[tuple[int, float]]:
    """The run's validation curve: (step, value) of every scalars event that carries `field`."""
    out = []
    for row in store.iter_events(run_id, kind="scalars"):
        value = json.loads(row.payload).get(field)
        if value is not None:
            out.append((row.step, value))
    return out


@router.get(
    "/groups/{group_id}",
    response_model=GroupPublic,
    responses={
        404: {"model": ErrorDetail},
        409: {"model": ErrorDetail, "description": "The group's stored data cannot be read."},
        422: {"model": ErrorDetail},
    },
)
def get_group(
    group_id: str,
    store: StoreDep,
    metric: str | None = Query(
        None,
        description="Final metric per arm (default: the preset's, else val_loss).",
        json_schema_extra={"enum": METRICS},
    ),
) -> GroupPublic:
    if metric is not None and metric not in METRICS:
        raise HTTPException(
            422,
            {
                "detail": f"Unknown metric {metric!r}; choose one of {', '.join(METRICS)}.",
                "fields": {"metric": "unknown"},
            },
        )
    rows, total = store.list_runs(group=group_id, limit=MAX_GROUP_RUNS)
    if not rows:
        raise HTTPException(
            404, f"No group {group_id!r}: launch one with POST /api/presets/{{name}} or POST /api/sweeps."
        )
    try:
        group = store.get_group(group_id)
        return summarize(
            group_id,
            group.meta if group else None,
            rows,
            lambda run_id, field: _curve(store, run_id, field),
            metric,
        )
    except StoredGroupError as exc:
        # What is stored is left as it is: its runs are still listed, read and exported one by one.
        log.error("GET /api/groups/%s: %s", group_id, exc)
        raise HTTPException(
            409,
            f"Group {group_id} cannot be summarized: {exc}. Nothing was changed; "
            f"GET /api/runs?group={group_id} lists its runs one by one.",
        ) from None
