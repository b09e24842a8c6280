"""`build_catalog`: the catalog as the API serves it (GET /api/catalog), with this server's limits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from normlab.settings import Settings
from normlab_client.catalog import CELLS, NORMS, TASKS, task_availability
from normlab_client.spec import RunSpec


def build_catalog(data_dir: Path | str | None = None, settings: Settings | None = None) -> dict[str, Any]:
    """The whole catalog as JSON-ready data: tasks (with availability), normalizers, cells, field ranges.

    With `settings`, the field ranges are this server's: steps capped at `max_steps`, probe cadences
    floored at `min_probe_every` (the limits POST /api/runs enforces), so a form can show them."""
    tasks = []
    for name, task in TASKS.items():
        avail = task_availability(name, data_dir)
        tasks.append({**task.public(), "available": avail.available, "unavailable_reason": avail.reason})
    fields = RunSpec.field_ranges()
    if settings is not None:
        _tighten(fields["steps"], "maximum", settings.max_steps, min)
        for name in ("trace_every", "fisher_every"):
            _tighten(fields["probes"][name], "minimum", settings.min_probe_every, max)
    return {
        "tasks": tasks,
        "norms": NORMS,
        "cells": CELLS,
        "fields": fields,
    }


def _tighten(prop: dict[str, Any], key: str, value: int, pick: Callable[[int, int], int]) -> None:
    """Set a JSON-schema bound on a field's numeric branch (an Optional field keeps it under anyOf)."""
    for branch in [prop, *prop.get("anyOf", [])]:
        if branch.get("type") in ("integer", "number"):
            branch[key] = pick(branch.get(key, value), value)
