"""What the store hands back: typed rows (a run as its table's columns, a roll-up bucket, a stored
event), so callers index them with names mypy checks."""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict, cast

from sqlalchemy import RowMapping


class RunRow(TypedDict):
    """A `runs` row: JSON columns (spec, summary) stay text until the API parses them."""

    id: str
    spec: str
    task: str
    norm: str
    status: str
    owner: str | None
    group_id: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    heartbeat_at: float | None
    worker_host: str | None
    device: str | None
    kernel_backend: str | None
    error: str | None
    summary: str | None
    last_seq: int
    scalars_count: int
    cancel_requested: bool
    name: str | None
    note: str | None


class RollupRow(NamedTuple):
    """One stored roll-up bucket (normlab.store.rollup): its last event and the per-metric aggregate."""

    seq_last: int
    step_last: int
    time_last: float
    data: str  # JSON {name: [sum, min, max, count]}


def run_row(mapping: RowMapping | dict[str, Any]) -> RunRow:
    # The table's columns are exactly RunRow's keys (tests/normlab/store/test_rows.py checks).
    return cast(RunRow, dict(mapping))
