"""POST /api/sweeps: a base spec crossed with lists of norms, batch sizes and seeds -> one group."""

from __future__ import annotations

import itertools

from fastapi import APIRouter, HTTPException, Request
from pydantic import ValidationError

from backend.auth import require_admin
from backend.deps import SettingsDep, StoreDep, UserDep
from backend.errors import validation_fields
from backend.runs_common import create_and_enqueue
from normlab.groups import sweep_meta
from normlab.store import new_run_id
from normlab_client.api_models import ErrorDetail, SweepCreate, SweepCreated
from normlab_client.spec import RunSpec

router = APIRouter(prefix="/api", tags=["runs"])
MAX_SWEEP_RUNS = 64


@router.post(
    "/sweeps",
    status_code=201,
    response_model=SweepCreated,
    responses={code: {"model": ErrorDetail} for code in (403, 422, 429, 503)},
)
def submit_sweep(
    body: SweepCreate, request: Request, store: StoreDep, settings: SettingsDep, user: UserDep
) -> SweepCreated:
    """Queue every combination as one group; `non_preemptible` (admin only) keeps its runs from
    yielding to interactive ones."""
    if body.non_preemptible:
        require_admin(request, "mark a sweep non-preemptible")
    base = body.base.model_dump()
    combos = list(
        itertools.product(
            body.norms or [base["norm"]],
            body.batch_sizes or [base["batch_size"]],
            body.seeds or [base["seed"]],
        )
    )
    if len(combos) > MAX_SWEEP_RUNS:
        raise HTTPException(
            422, f"A sweep may have at most {MAX_SWEEP_RUNS} runs (got {len(combos)}); shorten the lists."
        )
    specs = []
    for norm, batch_size, seed in combos:
        try:
            values = {**base, "norm": norm, "batch_size": batch_size, "seed": seed}
            specs.append(RunSpec.model_validate(values))
        except ValidationError as exc:
            fields = validation_fields([dict(e) for e in exc.errors()])
            what = f"norm={norm}, batch_size={batch_size}, seed={seed}"
            raise HTTPException(
                422,
                {
                    "detail": f"The sweep's combination {what} is invalid: " + "; ".join(fields.values()),
                    "fields": fields,
                },
            ) from exc
    group_id = new_run_id()
    varied = [
        name for name, values in (("norm", body.norms), ("batch_size", body.batch_sizes)) if len(values) > 1
    ]  # GET /api/groups/{id} makes one cell per combination of these
    run_ids = create_and_enqueue(
        store,
        settings,
        specs,
        user,
        group_id,
        lambda _ids: store.put_group(group_id, sweep_meta(varied, body.non_preemptible)),  # before they start
    )
    return SweepCreated(group_id=group_id, run_ids=run_ids)
