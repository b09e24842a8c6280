"""GET /api/catalog, /api/presets and /api/invariance (the engine's Table 1, computed once, cached)."""

from __future__ import annotations

import asyncio
import sys

from fastapi import APIRouter, HTTPException
from pydantic import ValidationError

from backend.deps import SettingsDep, StoreDep
from normlab.api_models import build_catalog
from normlab.presets import PRESETS
from normlab.store import Store
from normlab.table1 import Table1

router = APIRouter(prefix="/api", tags=["catalog"])
INVARIANCE_KEY = "invariance"
_invariance_lock = asyncio.Lock()


@router.get("/catalog")
def catalog(settings: SettingsDep) -> dict:
    return build_catalog(settings.data_dir, settings)


@router.get("/presets")
def presets() -> list[dict]:
    """The paper-figure presets (normlab/presets.py, torch-free), in the registry's order."""
    return [preset.public() for preset in PRESETS.values()]


@router.get("/invariance")
async def invariance(store: StoreDep) -> Table1:
    """Table 1 checked numerically by the engine. The API never imports torch: the first request runs
    `normlab invariance --json` in a subprocess and the result is cached in the store."""
    table = _cached_table(store)
    if table is None:
        async with _invariance_lock:
            table = _cached_table(store)
            if table is None:
                text = await _compute_invariance()
                store.cache_set(INVARIANCE_KEY, text)
                table = Table1.model_validate_json(text)
    return table


def _cached_table(store: Store) -> Table1 | None:
    """The cached table, or None when there is none or it no longer fits the contract (a data directory
    from an older normlab): then it is computed again instead of answering 500 forever."""
    cached = store.cache_get(INVARIANCE_KEY)
    if cached is None:
        return None
    try:
        return Table1.model_validate_json(cached)
    except ValidationError:
        return None


async def _compute_invariance() -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "normlab",
        "invariance",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=600)
    except TimeoutError as exc:
        proc.kill()
        raise HTTPException(503, "Computing the invariance table took too long; retry later.") from exc
    if proc.returncode != 0:
        raise HTTPException(
            503,
            "The invariance table could not be computed here: " + err.decode(errors="replace").strip()[-400:],
        )
    text = out.decode()
    Table1.model_validate_json(text)  # must be Table 1 before it is cached
    return text
