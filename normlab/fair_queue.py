"""The order in which queued runs are trained: interactive single runs before batch work, and users, then
groups, served in turn — not first come, first served. Torch-free and store-free: both queue forms (the
Celery worker claiming in the store, an embedded queue of claims on the runs table) and the API's queue
positions call `order` on the same rows, so the position a page shows is the order a worker follows.

A row is a dict with "id", "created_at", "owner" (None: anonymous) and "group_id" (None: a single run
from the Lab or the API; a preset's or sweep's runs share one). The order, as a sort key per queued run:

    1. class      interactive (no group) before batch (a preset or a sweep)
    2. turn       the run's place in its user's own line, plus the runs that user already has running:
                  a user with three runs waiting and one training is served after a user with one waiting
                  and none training; within a user, that user's groups take turns the same way
    3. created_at first come, first served only among runs with the same class and turn
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

INTERACTIVE, BATCH = 0, 1
Row = Mapping[str, Any]  # a runs row (normlab.store.RunRow) or the same fields as a dict


def run_class(row: Row) -> int:
    """INTERACTIVE for a single run, BATCH for one of a group (a preset's or a sweep's runs)."""
    return BATCH if row.get("group_id") else INTERACTIVE


def _user(row: Row) -> str:
    return str(row.get("owner") or "")


def order(queued: Iterable[Row], running: Iterable[Row] = ()) -> list[str]:
    """The queued runs' ids in the order workers should take them (see the module docstring)."""
    rows = sorted(queued, key=lambda r: (r["created_at"], r["id"]))
    busy_user = Counter(_user(r) for r in running)
    busy_group = Counter((_user(r), r.get("group_id")) for r in running)
    keys: dict[str, tuple[int, int, float, str]] = {}
    by_class_user: dict[tuple[int, str], list[Row]] = defaultdict(list)
    for r in rows:
        by_class_user[(run_class(r), _user(r))].append(r)
    for (cls, user), mine in by_class_user.items():
        # within one user: that user's groups (or single runs) take turns
        seen: Counter[str | None] = Counter()
        inner = []
        for r in mine:
            group = r.get("group_id")
            inner.append((seen[group] + busy_group[(user, group)], r["created_at"], r["id"], r))
            seen[group] += 1
        inner.sort(key=lambda t: t[:3])
        for turn, (_, _, _, r) in enumerate(inner):
            keys[r["id"]] = (cls, turn + busy_user[user], r["created_at"], r["id"])
    return sorted(keys, key=keys.__getitem__)


def to_yield(
    queued: Iterable[Row],
    running: Iterable[Row],
    now: float,
    patience_s: float,
    asked: Iterable[str] = (),
    *,
    workers: int | None = None,
    pinned: Iterable[str] = (),
) -> list[str]:
    """The batch runs to ask to yield their workers, youngest first (latest started): one for each
    interactive run that has waited `patience_s` (a free worker would have taken it by then) while every
    running run is batch work, less the yields `asked` already. When the number of `workers` is known
    and every one of them holds batch work, no free worker can come: an interactive run is served at
    once, without the patience. The runs of `pinned` groups (marked non-preemptible by an admin) are
    never asked. A yielded run goes back to the queue and continues later from its checkpoint;
    interactive work is never asked to yield."""
    running = list(running)
    if any(run_class(r) == INTERACTIVE for r in running):
        return []  # not every worker holds batch work
    if workers and len(running) >= workers:
        patience_s = 0.0  # every worker is busy with batch work
    waiting = [r for r in queued if run_class(r) == INTERACTIVE and now - r["created_at"] >= patience_s]
    pending = set(asked) & {r["id"] for r in running}
    kept = set(pinned)
    candidates = sorted(
        (r for r in running if r["id"] not in pending and r.get("group_id") not in kept),
        key=lambda r: (-(r.get("started_at") or 0.0), r["id"]),
    )
    return [r["id"] for r in candidates[: max(0, len(waiting) - len(pending))]]


def positions(queued: Iterable[Row], running: Iterable[Row] = ()) -> dict[str, int]:
    """{run id: its place in `order`, 1 = the next to be trained}."""
    return {rid: i + 1 for i, rid in enumerate(order(queued, running))}


def typical_run_s(wall_times: Iterable[float | None]) -> float | None:
    """The median wall time of recently finished runs (None without any): the unit of an estimate."""
    times = [t for t in wall_times if isinstance(t, int | float) and math.isfinite(t) and t > 0]
    return statistics.median(times) if times else None


def wait_estimate(position: int, typical_s: float | None, workers: int) -> float | None:
    """Seconds until a run at `position` starts: the runs ahead of it, `workers` at a time, each taking
    about `typical_s` (None when nothing has finished yet to judge by)."""
    if typical_s is None or position < 1:
        return None
    return math.ceil(position / max(1, workers)) * typical_s
