"""Min/max-bucket downsampling of a run's scalars, incremental so a 1M-point history reads fast.

A run's `scalars` events are numbered 0, 1, 2, … (their index). Level L groups 4**L consecutive ones
into a bucket holding, per metric, [sum, min, max, count] over the non-null values; buckets of level L+1
are merged from four of level L, so writing costs ~1.33 bucket updates per point.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from normlab_client.events import Scalars

SCALAR_NAMES: tuple[str, ...] = tuple(Scalars.model_fields)
BASE = 4
MAX_LEVEL = 10  # 4**10 ≈ 1M points per bucket


@dataclass
class Bucket:
    """One bucket's aggregate: per metric [sum, min, max, count], and its last step, time and seq."""

    data: dict[str, list[float]] = field(default_factory=dict)
    seq_last: int = 0
    step_last: int = 0
    time_last: float = 0.0
    n: int = 0  # events in the bucket

    def add_point(self, seq: int, step: int, time: float, values: dict[str, Any]) -> None:
        for name, v in values.items():
            if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
                continue
            agg = self.data.get(name)
            if agg is None:
                self.data[name] = [float(v), float(v), float(v), 1]
            else:
                agg[0] += v
                agg[1] = min(agg[1], v)
                agg[2] = max(agg[2], v)
                agg[3] += 1
        self.seq_last, self.step_last, self.time_last = seq, step, time
        self.n += 1

    def merge(self, other: Bucket) -> None:
        for name, (s, lo, hi, c) in other.data.items():
            agg = self.data.get(name)
            if agg is None:
                self.data[name] = [s, lo, hi, c]
            else:
                agg[0] += s
                agg[1] = min(agg[1], lo)
                agg[2] = max(agg[2], hi)
                agg[3] += c
        self.seq_last, self.step_last, self.time_last = other.seq_last, other.step_last, other.time_last
        self.n += other.n


class RollupBuilder:
    """Feeds scalars events in order; returns the buckets that each event completes (to store)."""

    def __init__(self, start_index: int = 0):
        self.index = start_index  # index of the next scalars event
        self._open: list[Bucket] = [Bucket() for _ in range(MAX_LEVEL + 1)]  # [0] unused

    def add(self, seq: int, step: int, time: float, values: dict[str, Any]) -> list[tuple[int, int, Bucket]]:
        """Add one scalars event; return (level, bucket_number, bucket) for every bucket it closes."""
        done: list[tuple[int, int, Bucket]] = []
        self._open[1].add_point(seq, step, time, values)
        count = self.index + 1
        level, size = 1, BASE
        while level <= MAX_LEVEL and count % size == 0:
            bucket = self._open[level]
            done.append((level, count // size - 1, bucket))
            self._open[level] = Bucket()
            if level < MAX_LEVEL:
                self._open[level + 1].merge(bucket)
            level, size = level + 1, size * BASE
        self.index += 1
        return done


def choose_level(total: int, max_points: int) -> int:
    """The finest level whose bucket count ceil(total / 4**L) fits in max_points (0 = raw points)."""
    level = 0
    while level < MAX_LEVEL and math.ceil(total / BASE**level) > max_points:
        level += 1
    return level


def bucket_json(bucket: Bucket) -> str:
    return json.dumps(bucket.data, separators=(",", ":"))


def bucket_rows(closed: list[tuple[int, int, Bucket]]) -> list[dict[str, Any]]:
    """The `rollups` rows (less run_id) of the buckets `RollupBuilder.add` closed, for Store.append_events."""
    return [
        {
            "level": level,
            "bucket": number,
            "seq_last": b.seq_last,
            "step_last": b.step_last,
            "time_last": b.time_last,
            "data": bucket_json(b),
        }
        for level, number, b in closed
    ]


def series_from_buckets(buckets: list[Bucket], names: list[str]) -> dict[str, dict[str, list[float]]]:
    """Series per metric (only buckets where it has a value): step, value = mean, min, max, time."""
    out: dict[str, dict[str, list[float]]] = {}
    for name in names:
        s: dict[str, list[float]] = {"step": [], "value": [], "min": [], "max": [], "time": []}
        for b in buckets:
            agg = b.data.get(name)
            if agg is None or agg[3] == 0:
                continue
            s["step"].append(b.step_last)
            s["value"].append(agg[0] / agg[3])
            s["min"].append(agg[1])
            s["max"].append(agg[2])
            s["time"].append(b.time_last)
        out[name] = s
    return out
