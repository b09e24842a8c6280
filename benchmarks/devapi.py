"""A stand-in normlab API with synthetic runs (no torch, no workers): for front-end development, the
front-end benchmark and browser tests that must not depend on training speed.

It answers the same routes with the same response models as `backend/` (client/normlab_client/api_models.py,
normlab/table1.py; SSE with `event:` = kind, multiplexed cursor ids), which
tests/frontend/test_devapi_contract.py checks against the real API's OpenAPI document, and mounts the
dashboard at "/". Runs are curves drawn from a formula, emitted at
`rate` scalars events per second, with hidden/fisher snapshots when probes are on. Not the product API.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from benchmarks import devapi_sim
from normlab.api_catalog import build_catalog
from normlab.presets import PRESETS
from normlab.settings import Settings
from normlab.table1 import Table1
from normlab_client.api_models import (
    MetricsPublic,
    RunCreated,
    RunList,
    RunPublic,
    SweepCreate,
    SweepCreated,
)
from normlab_client.events import ACTIVE_STATUSES, TERMINAL_STATUSES, RunStatus
from normlab_client.spec import RunSpec, combination_problems


def _fields(exc: ValidationError, body: dict) -> dict[str, str]:
    out: dict[str, str] = {}
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "body"
        if err.get("type") == "spec_combination":
            spec = RunSpec.model_construct(**{k: v for k, v in body.items() if k in RunSpec.model_fields})
            for name, msg in combination_problems(spec):
                out[name] = msg
        else:
            out.setdefault(loc, err.get("msg", "invalid value"))
    return out


def _invalid(exc: ValidationError, body: dict) -> JSONResponse:
    fields = _fields(exc, body)
    return JSONResponse(
        {"detail": "; ".join(f"{k}: {v}" for k, v in fields.items()), "fields": fields}, status_code=422
    )


class DevAPI:
    """In-memory runs and their events; `app` is the FastAPI application."""

    def __init__(self, rate: float = 20.0, with_frontend: bool = True, invariance: dict | None = None):
        self.rate = rate
        self.runs: dict[str, dict] = {}
        self.events: dict[str, list[dict]] = {}
        self.changed = asyncio.Event()
        self.invariance = invariance
        self.app = self._build(with_frontend)

    # ---- synthetic training ------------------------------------------------------------------
    def create(self, spec: RunSpec, group: str | None = None) -> str:
        rid = uuid.uuid4().hex[:16]
        self.runs[rid] = {
            "id": rid,
            "spec": spec.resolved().model_dump(),
            "status": RunStatus.QUEUED,
            "owner": None,
            "group_id": group,
            "created_at": datetime.now(UTC).isoformat(),
            "started_at": None,
            "finished_at": None,
            "worker_host": "devapi",
            "device": "synthetic",
            "kernel_backend": "none",
            "error": None,
            "summary": {},
            "last_seq": 0,
            "queue_position": None,
        }
        self.events[rid] = []
        asyncio.get_running_loop().create_task(devapi_sim.train(self, rid))
        return rid

    def _emit(self, rid: str, kind: str, step: int, payload: dict) -> None:
        seq = len(self.events[rid]) + 1
        self.events[rid].append(
            {"run_id": rid, "seq": seq, "step": step, "kind": kind, "time": time.time(), "payload": payload}
        )
        self.runs[rid]["last_seq"] = seq
        self.changed.set()
        self.changed = asyncio.Event()

    # ---- routes ------------------------------------------------------------------------------
    def _build(self, with_frontend: bool) -> FastAPI:
        app = FastAPI(title="normlab dev API")

        def missing(rid):
            return JSONResponse({"detail": f"No run {rid}.", "fields": {}}, status_code=404)

        @app.get("/api/health")
        def health():
            return {"ok": True}

        @app.get("/api/me")
        def me():
            return {"auth": "off", "user": None, "admin": False, "public_read": True}

        @app.get("/api/catalog")
        def catalog():
            return build_catalog(None, Settings())  # the default server limits, as `normlab up` shows

        @app.get("/api/presets")
        def presets():
            latest = getattr(self, "latest_presets", {})  # filled by devapi_groups' launches
            estimates = getattr(self, "preset_estimates", {})  # set by a test: {preset: estimate}
            return [
                {**p.public(), "latest_group": latest.get(p.name), "estimate": estimates.get(p.name)}
                for p in PRESETS.values()
            ]

        @app.get("/api/invariance", response_model=Table1)
        def invariance():
            if self.invariance is None:
                return JSONResponse({"detail": "Table 1 has not been computed yet.", "fields": {}}, 503)
            return self.invariance

        @app.post("/api/runs", status_code=201, response_model=RunCreated)
        async def create(request: Request):
            body = await request.json()
            try:
                spec = RunSpec.model_validate(body)
            except ValidationError as exc:
                return _invalid(exc, body)
            return {"id": self.create(spec), "status": RunStatus.QUEUED}

        @app.post("/api/sweeps", status_code=201, response_model=SweepCreated)
        async def sweep(request: Request):
            body = await request.json()
            try:
                sw = SweepCreate.model_validate(body)
                specs = [
                    sw.base.model_copy(update={"norm": n, "batch_size": b, "seed": s})
                    for n in sw.norms or [sw.base.norm]
                    for b in sw.batch_sizes or [sw.base.batch_size]
                    for s in sw.seeds or [sw.base.seed]
                ]
                specs = [RunSpec.model_validate(s.model_dump()) for s in specs]
            except ValidationError as exc:
                return _invalid(exc, body.get("base", {}) if isinstance(body, dict) else {})
            group = uuid.uuid4().hex[:12]
            return {"group_id": group, "run_ids": [self.create(s, group) for s in specs]}

        @app.get("/api/runs", response_model=RunList)
        def runs(
            task: str | None = None,
            norm: str | None = None,
            status: str | None = None,
            group: str | None = None,
            owner: str | None = None,
            offset: int = 0,
            limit: int = 50,
        ):
            items = [
                r
                for r in reversed(self.runs.values())
                if (not task or r["spec"]["task"] == task)
                and (not norm or r["spec"]["norm"] == norm)
                and (not status or r["status"] == status)
                and (not group or r["group_id"] == group)
                and (not owner or r["owner"] == owner)
            ]
            return {
                "items": items[offset : offset + limit],
                "total": len(items),
                "offset": offset,
                "limit": limit,
            }

        @app.get("/api/runs/{run_id}", response_model=RunPublic)
        def run(run_id: str):
            return self.runs.get(run_id) or missing(run_id)

        @app.get("/api/runs/{run_id}/metrics", response_model=MetricsPublic)
        def metrics(run_id: str, names: str | None = None, max_points: int = 1000):
            rid = run_id
            if rid not in self.runs:
                return missing(rid)
            wanted = names.split(",") if names else None
            series: dict[str, dict] = {}
            for e in self.events[rid]:
                if e["kind"] != "scalars":
                    continue
                for k, v in e["payload"].items():
                    if v is None or (wanted and k not in wanted):
                        continue
                    s = series.setdefault(k, {"step": [], "value": [], "min": [], "max": [], "time": []})
                    for key, val in (
                        ("step", e["step"]),
                        ("value", v),
                        ("min", v),
                        ("max", v),
                        ("time", e["time"]),
                    ):
                        s[key].append(val)
            return {
                "run_id": rid,
                "series": series,
                "downsampled": False,
                "total_points": sum(len(s["step"]) for s in series.values()),
            }

        @app.post("/api/runs/{run_id}/cancel", response_model=RunPublic)
        def cancel(run_id: str):
            rid = run_id
            if rid not in self.runs:
                return missing(rid)
            if self.runs[rid]["status"] in ACTIVE_STATUSES:
                self.runs[rid]["status"] = RunStatus.CANCELLED
            return self.runs[rid]

        @app.delete("/api/runs/{run_id}", status_code=204)
        def delete(run_id: str):
            rid = run_id
            self.runs.pop(rid, None)
            self.events.pop(rid, None)
            return Response(status_code=204)

        @app.get("/api/runs/{run_id}/export")
        def export(run_id: str, format: str = "json"):
            return self.events.get(run_id, [])

        @app.get("/api/events")
        async def events(request: Request, runs: str, after: str | None = None):
            cursor = {r: 0 for r in runs.split(",") if r in self.runs}
            last = request.headers.get("last-event-id") or after or ""
            for part in filter(None, last.split(",")):
                rid, _, seq = part.partition(":")
                if rid in cursor:
                    cursor[rid] = int(seq)
            return StreamingResponse(
                self._stream(cursor), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )

        from benchmarks import devapi_groups

        devapi_groups.add_routes(app, self)
        if with_frontend:
            import warnings

            with warnings.catch_warnings():  # deprecated in Starlette, still working in this version
                warnings.simplefilter("ignore")
                from starlette.middleware.wsgi import WSGIMiddleware

            from frontend.app import create_app

            app.mount("/", WSGIMiddleware(create_app(api_base="").server))
        return app

    async def _stream(self, cursor: dict[str, int]):
        yield b"retry: 1000\n\n"
        active = [r for r in cursor if r in self.events]
        while active:
            waiter = self.changed
            for rid in list(active):
                for e in self.events.get(rid, [])[cursor[rid] :]:
                    cursor[rid] = e["seq"]
                    ids = ",".join(f"{r}:{s}" for r, s in cursor.items())
                    yield f"id: {ids}\nevent: {e['kind']}\ndata: {json.dumps(e)}\n\n".encode()
                    if e["kind"] == "status" and e["payload"]["status"] in TERMINAL_STATUSES:
                        active.remove(rid)
            try:
                await asyncio.wait_for(waiter.wait(), 10)
            except TimeoutError:
                yield b": heartbeat\n\n"


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - a development server
    import argparse

    import uvicorn

    p = argparse.ArgumentParser(description="normlab front end against a synthetic API")
    p.add_argument("--port", type=int, default=8060)
    p.add_argument("--rate", type=float, default=20.0)
    args = p.parse_args(argv)
    uvicorn.run(DevAPI(rate=args.rate).app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
