"""A run's metric history, downsampled into min/max buckets (spikes survive), and raw exports."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from normlab.store import RunRow, Store
from normlab.store.rollup import BASE, SCALAR_NAMES, Bucket, choose_level, series_from_buckets


def run_metrics(store: Store, run: RunRow, names: list[str] | None, max_points: int) -> dict[str, Any]:
    """MetricsPublic for a run: raw points when they fit in max_points, else buckets of 4**L points
    (between max_points/4 and max_points of them) read from the roll-ups plus the open tail."""
    names = list(names or SCALAR_NAMES)
    total = int(run["scalars_count"])
    level = choose_level(total, max_points)
    buckets: list[Bucket] = []
    after = 0
    if level > 0:
        for seq_last, step_last, time_last, data in store.rollup_rows(run["id"], level):
            buckets.append(Bucket(json.loads(data), seq_last, step_last, time_last, BASE**level))
        if buckets:
            after = buckets[-1].seq_last
    # Raw points, or the open tail after the last closed bucket (fewer than 4**level events).
    rows = (
        store.iter_events(run["id"], kind="scalars")
        if level == 0
        else store.events_after(run["id"], after, limit=BASE**level, kind="scalars")
    )
    tail = Bucket()
    for row in rows:
        target = Bucket() if level == 0 else tail
        target.add_point(row.seq, row.step, row.time, json.loads(row.payload))
        if level == 0:
            buckets.append(target)
    if tail.n:
        buckets.append(tail)
    return {
        "run_id": run["id"],
        "series": series_from_buckets(buckets, names),
        "total_points": total,
        "downsampled": level > 0,
    }


def export_csv(store: Store, run_id: str) -> Iterator[str]:
    """Yield CSV text: one row per scalars event (seq, step, time and every metric), raw."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["seq", "step", "time", *SCALAR_NAMES])
    for row in store.iter_events(run_id, kind="scalars"):
        values = json.loads(row.payload)
        writer.writerow(
            [
                row.seq,
                row.step,
                repr(row.time),
                *("" if values.get(n) is None else repr(values[n]) for n in SCALAR_NAMES),
            ]
        )
        if buf.tell() > 65536:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def export_json(store: Store, run_id: str, run_public_json: str) -> Iterator[str]:
    """Yield JSON text {"run": RunPublic, "events": [every Event, raw]}."""
    from normlab.store import event_json

    yield f'{{"run":{run_public_json},"events":['
    first = True
    for row in store.iter_events(run_id):
        yield ("" if first else ",") + event_json(run_id, row)
        first = False
    yield "]}"
