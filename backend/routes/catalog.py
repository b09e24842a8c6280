"""GET /api/catalog, /api/presets and /api/invariance (the engine's Table 1, computed at build time)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from backend.deps import SettingsDep, StoreDep
from normlab.api_models import build_catalog
from normlab.presets import PRESETS
from normlab.table1 import Table1, computed_table

router = APIRouter(prefix="/api", tags=["catalog"])


@router.get("/catalog")
def catalog(settings: SettingsDep) -> dict[str, Any]:
    return build_catalog(settings.data_dir, settings)


@router.get("/presets")
def presets(store: StoreDep) -> list[dict[str, Any]]:
    """The paper-figure presets (normlab/presets.py, torch-free), in the registry's order, each with the
    group id of its latest launch on this server ("latest_group", None if never launched)."""
    latest = store.latest_preset_groups()
    return [{**preset.public(), "latest_group": latest.get(name)} for name, preset in PRESETS.items()]


@router.get("/invariance")
def invariance() -> Table1:
    """Table 1 checked numerically by the engine. The API never imports torch: the table was computed when
    this tree was built (normlab/table1.py), and a test recomputes it."""
    return computed_table()
