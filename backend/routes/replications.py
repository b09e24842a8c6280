"""GET /api/presets/{name}/replications: a preset's replication record — per claim, its verdict on the
declared seeds beside its verdict on the latest fresh draw (`POST /api/presets/{name}` with
`{"fresh": K}`), and how many fresh draws held."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from backend.deps import StoreDep
from backend.routes.groups import get_group
from normlab.presets import PRESETS
from normlab.replication import Replications, record
from normlab_client.api_models import ErrorDetail
from normlab_client.group_models import GroupPublic, PresetMeta

router = APIRouter(prefix="/api", tags=["presets"])
MAX_DRAWS = 20  # the record reads at most this many latest fresh draws


@router.get(
    "/presets/{name}/replications", response_model=Replications, responses={404: {"model": ErrorDetail}}
)
def replications(name: str, store: StoreDep) -> Replications:
    preset = PRESETS.get(name)
    if preset is None:
        raise HTTPException(404, f"Unknown preset {name!r}; choose one of: {', '.join(PRESETS)}.")
    rows = store.preset_groups(name)
    fresh = [r for r in rows if isinstance(r.meta, PresetMeta) and r.meta.fresh][-MAX_DRAWS:]
    plain = [r for r in rows if not (isinstance(r.meta, PresetMeta) and r.meta.fresh)]
    launches: list[tuple[GroupPublic, list[int], bool]] = []
    for row in [*plain[-1:], *fresh]:  # the latest launch on the declared seeds, then every fresh draw
        try:
            group = get_group(row.id, store, None)
        except HTTPException:
            continue  # an unreadable group: GET /api/groups/{id} says why
        launches.append((group, sorted({r.seed for r in group.runs}), row in fresh))
    return record(name, list(preset.seeds), launches)
