"""The synthetic API's presets and groups routes (`POST /api/presets/{name}`, `GET /api/groups/{id}`,
`GET /api/presets/{name}/replications`), answered by the same torch-free code as the real API
(normlab.groups, normlab.claims, normlab.replication) over the synthetic runs: the browser tests of the
Presets page and of Compare's group view run in seconds."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from normlab.claims import CURVE_FIELD
from normlab.groups import preset_meta, summarize
from normlab.presets import PRESETS
from normlab.replication import Replications, draw_fresh_seeds, record
from normlab_client.group_models import GroupPublic, PresetLaunch, PresetLaunched, PresetMeta


def add_routes(app: FastAPI, api: Any) -> None:
    """Register both routes on the synthetic API's app (before the dashboard is mounted at "/");
    `api` is the benchmarks.devapi.DevAPI (its runs, events and `create`)."""
    meta: dict[str, PresetMeta] = {}
    api.latest_presets = {}  # preset name -> its latest launch's group (GET /api/presets)

    @app.post("/api/presets/{name}", status_code=201, response_model=PresetLaunched)
    async def launch_preset(name: str, request: Request):
        preset = PRESETS.get(name)
        if preset is None:
            return JSONResponse({"detail": f"Unknown preset {name!r}.", "fields": {}}, status_code=404)
        try:
            body = PresetLaunch.model_validate((await request.json()) if await request.body() else {})
        except ValidationError as exc:
            return JSONResponse({"detail": str(exc), "fields": {}}, status_code=422)
        seeds = body.seeds if body.seeds is not None else list(preset.seeds)
        if body.fresh is not None:
            seeds = draw_fresh_seeds(body.fresh)
        group = uuid.uuid4().hex[:12]
        labels: dict[str, str] = {}
        for label, base in zip(preset.run_labels(), preset.runs, strict=True):
            spec = base if body.steps is None else base.model_copy(update={"steps": body.steps})
            for seed in seeds:
                labels[api.create(spec.model_copy(update={"seed": seed}), group)] = label
        meta[group] = preset_meta(name, labels, body.steps, body.swap, fresh=body.fresh is not None)
        if body.fresh is None:  # a fresh draw is the replication record, never the card's latest launch
            api.latest_presets[name] = group
        return {"group_id": group, "run_ids": list(labels)}

    @app.get("/api/groups/{group_id}", response_model=GroupPublic)
    def group(group_id: str, metric: str | None = None):
        runs = [r for r in api.runs.values() if r["group_id"] == group_id]
        if not runs:
            return JSONResponse({"detail": f"No group {group_id!r}.", "fields": {}}, status_code=404)

        def curve_of(run_id: str, field: str) -> list[tuple[int, float]]:
            return [
                (e["step"], e["payload"][field])
                for e in api.events.get(run_id, [])
                if e["kind"] == "scalars" and e["payload"].get(field) is not None
            ]

        if metric is not None and metric not in CURVE_FIELD:
            return JSONResponse({"detail": f"Unknown metric {metric!r}.", "fields": {}}, status_code=422)
        return summarize(group_id, meta.get(group_id), runs, curve_of, metric)

    @app.get("/api/presets/{name}/replications", response_model=Replications)
    def replications(name: str):
        preset = PRESETS.get(name)
        if preset is None:
            return JSONResponse({"detail": f"Unknown preset {name!r}.", "fields": {}}, status_code=404)
        mine = [(gid, m) for gid, m in meta.items() if m.preset == name]  # launch order
        latest = [gid for gid, m in mine if not m.fresh][-1:]
        launches = []
        for gid in [*latest, *(g for g, m in mine if m.fresh)]:
            summary = group(gid)
            if isinstance(summary, GroupPublic):
                launches.append((summary, sorted({r.seed for r in summary.runs}), meta[gid].fresh))
        return record(name, list(preset.seeds), launches)
