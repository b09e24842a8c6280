"""POST /api/runs/{id}/resubmit: train a finished run's stored spec again (after `lost`, `failed`, …)
with one request; the new run belongs to the caller and joins the run's group if the caller owns it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from backend.deps import SettingsDep, StoreDep, UserDep, get_run_or_404
from backend.runs_common import create_and_enqueue, stored_spec
from normlab_client.api_models import ErrorDetail, RunCreated
from normlab_client.events import ACTIVE_STATUSES, RunStatus

router = APIRouter(prefix="/api/runs", tags=["runs"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorDetail} for code in (404, 409, 422, 429)}


@router.post("/{run_id}/resubmit", status_code=201, response_model=RunCreated, responses=ERRORS)
def resubmit(run_id: str, store: StoreDep, settings: SettingsDep, user: UserDep) -> RunCreated:
    """Queue a new run with the same (resolved) spec. The old run and its events stay as they are."""
    run = get_run_or_404(store, run_id)
    if run["status"] in ACTIVE_STATUSES:
        raise HTTPException(
            409,
            f"Run {run_id} is still {run['status']}; wait for it to end or cancel it "
            "first (POST /api/runs/{id}/cancel).",
        )
    spec = stored_spec(run)  # 409 naming the field when it cannot be read
    # Only the group's owner adds to it: a stranger's copy would change that user's arms and claims.
    group = run["group_id"] if run["owner"] == user else None
    [new_id] = create_and_enqueue(store, settings, [spec], user, group)
    return RunCreated(id=new_id, status=RunStatus.QUEUED)
