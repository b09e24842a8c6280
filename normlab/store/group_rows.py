"""The store's groups: what launched a group of runs (a preset over seeds, or a sweep)."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Engine, insert, select

from normlab.store.schema import groups


class GroupRow(BaseModel):
    """A stored group: its kind, the preset it ran (if any) and the metadata `normlab.groups` reads."""

    id: str
    kind: str
    preset: str | None
    meta: dict[str, Any]
    created_at: float


class GroupsMixin:
    engine: Engine

    def put_group(self, group_id: str, meta: dict[str, Any]) -> None:
        """Record what launched a group (`normlab.groups.preset_meta` / `sweep_meta`)."""
        kind = meta.get("kind") if meta.get("kind") in ("preset", "sweep") else "group"
        with self.engine.begin() as conn:
            conn.execute(
                insert(groups).values(
                    id=group_id,
                    kind=kind,
                    preset=meta.get("preset") if kind == "preset" else None,
                    meta=json.dumps(meta),
                    created_at=time.time(),
                )
            )

    def latest_preset_groups(self) -> dict[str, str]:
        """{preset name: the id of its latest launch} (the Presets page, in any browser)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(groups.c.preset, groups.c.id)
                .where(groups.c.kind == "preset")
                .order_by(groups.c.created_at)
            ).all()
        return {preset: gid for preset, gid in rows if preset}  # the latest launch wins

    def get_group(self, group_id: str) -> GroupRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(groups).where(groups.c.id == group_id)).mappings().first()
        if row is None:
            return None
        return GroupRow(**{**row, "meta": json.loads(row["meta"])})
