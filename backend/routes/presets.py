"""POST /api/presets/{name}: launch a preset (a figure of the paper) over its seeds as one group, or over
seeds drawn at launch (`{"fresh": K}`: a replication, recorded as one)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from pydantic import ValidationError

from backend.auth import require_admin
from backend.deps import SettingsDep, StoreDep, UserDep
from backend.routes.sweeps import MAX_SWEEP_RUNS
from backend.runs_common import create_and_enqueue
from normlab.groups import preset_meta, swapped_label
from normlab.presets import PRESETS
from normlab.replication import draw_fresh_seeds
from normlab.store import new_run_id
from normlab_client.api_models import ErrorDetail
from normlab_client.group_models import PresetLaunch, PresetLaunched
from normlab_client.spec import RunSpec

router = APIRouter(prefix="/api", tags=["presets"])


@router.post(
    "/presets/{name}",
    status_code=201,
    response_model=PresetLaunched,
    responses={code: {"model": ErrorDetail} for code in (403, 404, 422, 429, 503)},
)
def launch_preset(
    name: str,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    user: UserDep,
    body: PresetLaunch | None = None,
) -> PresetLaunched:
    """Queue every run of the preset once per seed, in one group (followed by GET /api/groups/{group_id});
    `non_preemptible` (admin only) keeps its runs from yielding to interactive ones."""
    preset = PRESETS.get(name)
    if preset is None:
        raise HTTPException(404, f"Unknown preset {name!r}; choose one of: {', '.join(PRESETS)}.")
    body = body or PresetLaunch(seeds=None, steps=None, fresh=None)
    if body.non_preemptible:
        require_admin(request, "mark a preset non-preemptible")
    seeds = list(body.seeds if body.seeds is not None else preset.seeds)
    if body.fresh is not None:  # a replication: seeds no rule, margin or tuning ever saw
        seeds = draw_fresh_seeds(body.fresh)
    total = len(seeds) * len(preset.runs)
    if total > MAX_SWEEP_RUNS:
        raise HTTPException(
            422,
            {
                "detail": f"Preset {name!r} has {len(preset.runs)} runs per seed, so "
                f"{len(seeds)} seeds make {total} runs; a group may have at most "
                f"{MAX_SWEEP_RUNS}: give fewer seeds.",
                "fields": {"seeds": "too many"},
            },
        )
    specs, labels = [], []
    for label, base in zip(preset.run_labels(), preset.runs, strict=True):
        spec = base if body.steps is None else base.model_copy(update={"steps": body.steps})
        if body.swap:
            spec, label = _swapped(name, preset.scale_map is not None, spec, label, body.swap)
        for seed in seeds:
            specs.append(spec.model_copy(update={"seed": seed}))
            labels.append(label)
    group_id = new_run_id()

    def record(run_ids: list[str]) -> None:  # before any of its runs can start
        meta = preset_meta(
            name,
            dict(zip(run_ids, labels, strict=True)),
            body.steps,
            body.swap,
            fresh=body.fresh is not None,
            non_preemptible=body.non_preemptible,
        )
        store.put_group(group_id, meta)

    run_ids = create_and_enqueue(store, settings, specs, user, group_id, record)
    return PresetLaunched(group_id=group_id, run_ids=run_ids)


def _swapped(name: str, is_map: bool, spec: RunSpec, label: str, swap: dict[str, str]) -> tuple[RunSpec, str]:
    """The run with its normalizer swapped (checked like a submitted spec: 422 naming what to change)."""
    if is_map:
        raise HTTPException(
            422,
            {
                "detail": f"Preset {name!r} is a map; swap applies to the presets without one.",
                "fields": {"swap": "not for a map"},
            },
        )
    if spec.norm not in swap:
        return spec, label
    try:
        swapped = RunSpec.model_validate({**spec.model_dump(exclude_unset=True), "norm": swap[spec.norm]})
    except ValidationError as exc:
        message = "; ".join(str(e["msg"]) for e in exc.errors()[:3])
        raise HTTPException(
            422, {"detail": f"swap {spec.norm} -> {swap[spec.norm]}: {message}", "fields": {"swap": message}}
        ) from None
    return swapped, swapped_label(label, swap)
