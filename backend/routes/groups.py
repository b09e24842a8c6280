"""GET /api/groups/{group_id}: a preset's or sweep's runs, cells (mean ± std, mean ± band curves), claims."""

from __future__ import annotations

import json

from fastapi import APIRouter, HTTPException, Query

from backend.deps import StoreDep
from normlab.api_models import ErrorDetail
from normlab.claims import CURVE_FIELD
from normlab.group_models import GroupPublic
from normlab.groups import summarize
from normlab.store import Store

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
    responses={404: {"model": ErrorDetail}, 422: {"model": ErrorDetail}},
)
def get_group(
    group_id: str,
    store: StoreDep,
    metric: str | None = Query(
        None, description="Final metric per cell (default: the preset's, else val_loss)."
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
    group = store.get_group(group_id)
    meta = group.meta if group else None
    return GroupPublic.model_validate(
        summarize(group_id, meta, rows, lambda run_id, field: _curve(store, run_id, field), metric)
    )
