"""The store's groups: what launched a group of runs (a preset over seeds, or a sweep)."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy import Engine, insert, select

from normlab.estimates import Launch, TimedRun
from normlab.store.schema import groups, runs
from normlab_client.group_models import (
    GroupMeta,
    PlainMeta,
    PresetMeta,
    StoredGroupError,
    SweepMeta,
    problems,
)

__all__ = ["GroupRow", "GroupsMixin", "StoredGroupError", "read_meta"]


class GroupRow(BaseModel):
    """A stored group: its kind, the preset it ran (if any) and what launched it."""

    id: str
    kind: str
    preset: str | None
    meta: GroupMeta
    created_at: float


def read_meta(group_id: str, text: str) -> GroupMeta:
    """A stored group's metadata; a group of neither kind (no preset, no sweep) reads as a plain group.
    Raises StoredGroupError, naming the group and the problem, for text that is not such metadata."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise StoredGroupError(f"group {group_id}: its stored metadata is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise StoredGroupError(f"group {group_id}: its stored metadata is not a JSON object")
    model: type[PresetMeta | SweepMeta] = PresetMeta if data.get("kind") == "preset" else SweepMeta
    if data.get("kind") not in ("preset", "sweep"):
        return PlainMeta()
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise StoredGroupError(
            f"group {group_id}: its stored {data['kind']} metadata is malformed ({problems(exc)})"
        ) from None


def _flag(text: str | None, name: str) -> bool:
    """Whether stored metadata says `name: true` (unreadable metadata says nothing)."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return False
    return isinstance(data, dict) and data.get(name) is True


def _is_fresh(text: str | None) -> bool:
    return _flag(text, "fresh")


class GroupsMixin:
    engine: Engine

    def put_group(self, group_id: str, meta: GroupMeta) -> None:
        """Record what launched a group (`normlab.groups.preset_meta` / `sweep_meta`)."""
        with self.engine.begin() as conn:
            conn.execute(
                insert(groups).values(
                    id=group_id,
                    kind=meta.kind,
                    preset=meta.preset if isinstance(meta, PresetMeta) else None,
                    meta=meta.model_dump_json(),
                    created_at=time.time(),
                )
            )

    def latest_preset_groups(self) -> dict[str, str]:
        """{preset name: the id of its latest launch that is not a fresh draw} (the Presets page, in any
        browser; fresh draws are its replication record)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(groups.c.preset, groups.c.id, groups.c.meta)
                .where(groups.c.kind == "preset")
                .order_by(groups.c.created_at)
            ).all()
        # the latest launch wins
        return {preset: gid for preset, gid, meta in rows if preset and not _is_fresh(meta)}

    def preset_launch_times(self) -> dict[str, list[Launch]]:
        """{preset: its launches as the preset defines them (no steps override, no swap), each run with
        its arm, status and start and end times}: what `normlab.estimates.estimate` reduces. Groups whose
        metadata cannot be read are left out."""
        with self.engine.connect() as conn:
            found = conn.execute(
                select(groups.c.id, groups.c.preset, groups.c.meta, groups.c.created_at).where(
                    groups.c.kind == "preset"
                )
            ).all()
            launches: dict[str, tuple[str, PresetMeta, float]] = {}
            for gid, preset, text, created in found:
                try:
                    meta = read_meta(gid, text)
                except StoredGroupError:
                    continue
                if preset and isinstance(meta, PresetMeta) and meta.steps is None and not meta.swap:
                    launches[gid] = (preset, meta, created)
            rows = (
                conn.execute(
                    select(
                        runs.c.group_id, runs.c.id, runs.c.status, runs.c.started_at, runs.c.finished_at
                    ).where(runs.c.group_id.in_(list(launches)))
                ).all()
                if launches
                else []
            )
        timed: dict[str, list[TimedRun]] = {}
        for gid, rid, status, started, finished in rows:
            label = launches[gid][1].labels.get(rid)
            if label is not None:
                timed.setdefault(gid, []).append(TimedRun(label, status, started, finished))
        out: dict[str, list[Launch]] = {}
        for gid, (preset, _meta, created) in launches.items():
            out.setdefault(preset, []).append(Launch(created, timed.get(gid, [])))
        return out

    def preset_groups(self, preset: str) -> list[GroupRow]:
        """Every launch of `preset`, oldest first (a group whose metadata cannot be read is left out)."""
        with self.engine.connect() as conn:
            rows = (
                conn.execute(select(groups).where(groups.c.preset == preset).order_by(groups.c.created_at))
                .mappings()
                .all()
            )
        out = []
        for row in rows:
            try:
                out.append(GroupRow(**{**row, "meta": read_meta(row["id"], row["meta"])}))
            except StoredGroupError:
                continue  # GET /api/groups/{id} names it; the record goes on without it
        return out

    def pinned_groups(self, group_ids: set[str]) -> set[str]:
        """Those of `group_ids` an admin marked non-preemptible (their runs never yield)."""
        if not group_ids:
            return set()
        with self.engine.connect() as conn:
            rows = conn.execute(select(groups.c.id, groups.c.meta).where(groups.c.id.in_(group_ids))).all()
        return {gid for gid, meta in rows if _flag(meta, "non_preemptible")}

    def get_group(self, group_id: str) -> GroupRow | None:
        """The stored group, or None; raises StoredGroupError when its metadata cannot be read."""
        with self.engine.connect() as conn:
            row = conn.execute(select(groups).where(groups.c.id == group_id)).mappings().first()
        if row is None:
            return None
        return GroupRow(**{**row, "meta": read_meta(group_id, row["meta"])})
