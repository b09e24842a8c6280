"""GET /api/catalog, /api/presets and /api/invariance (the engine's Table 1, computed at build time, and
the rows of registered normalizers as a worker measured them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter

from backend.deps import SettingsDep, StoreDep
from normlab.api_catalog import build_catalog
from normlab.estimates import Launch, estimate
from normlab.presets import PRESETS, Preset
from normlab.table1 import REGISTERED_FILE, RegisteredRows, Table1, computed_table, with_registered
from normlab_client.norms import registered

router = APIRouter(prefix="/api", tags=["catalog"])


@router.get("/catalog")
def catalog(settings: SettingsDep) -> dict[str, Any]:
    return build_catalog(settings.data_dir, settings)


@router.get("/presets")
def presets(store: StoreDep) -> list[dict[str, Any]]:
    """The paper-figure presets (normlab/presets.py, torch-free), in the registry's order, each with the
    group id of its latest launch on this server ("latest_group", None if never launched) and how long a
    launch takes here ("estimate": normlab.estimates, from earlier launches' measured run times; None
    before any run of it completed here)."""
    latest = store.latest_preset_groups()
    times = store.preset_launch_times()
    return [
        {
            **preset.public(),
            "latest_group": latest.get(name),
            "estimate": _estimate(preset, times.get(name, [])),
        }
        for name, preset in PRESETS.items()
    ]


def _estimate(preset: Preset, launches: list[Launch]) -> dict[str, Any] | None:
    found = estimate(preset.run_labels(), len(preset.seeds), launches)
    return found.model_dump() if found is not None else None


@router.get("/invariance")
def invariance(settings: SettingsDep) -> Table1:
    """Table 1 checked numerically by the engine. The API never imports torch: the table was computed when
    this tree was built (normlab/table1.py), and a test recomputes it; the rows of registered normalizers
    (normlab_client.norms) are the ones a worker measured at its start, once one has."""
    return with_registered(computed_table(), _registered_rows(settings.data_dir), sorted(registered()))


def _registered_rows(data_dir: Path) -> RegisteredRows | None:
    try:
        return RegisteredRows.model_validate_json((data_dir / REGISTERED_FILE).read_text())
    except (OSError, ValueError):  # no worker has measured them yet (or a file of an older release)
        return None
