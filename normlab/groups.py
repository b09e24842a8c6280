"""A group's results (a preset launched over seeds, or a sweep): arms and, for a preset, its claims.

Torch-free and store-free: `summarize(meta, runs, curve_of)` takes the group's metadata (what launched it),
its runs as stored ({"id", "spec", "status", "summary"}, JSON as dicts or text) and a function giving a
run's validation curve, and returns `normlab_client.group_models.GroupPublic`, aggregated by
`normlab.arms` and judged by `normlab.claims` exactly as `normlab reproduce` does. Only runs that have
ended enter arms and claims, so the verdict fills in as runs finish.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from normlab.arms import SeedRecord, aggregate, trace_stats
from normlab.claims import curve_field, higher_is_better, judge_all, metric_key
from normlab.maps import map_points
from normlab.presets import PRESETS
from normlab_client.events import TERMINAL_STATUSES
from normlab_client.group_models import (
    GroupMeta,
    GroupPublic,
    GroupRun,
    PresetMeta,
    StoredGroupError,
    SweepMeta,
    problems,
)

SKIP_FIELDS = {"seed", "probes"}  # never what tells a sweep's arms apart


def preset_meta(
    name: str,
    run_labels: dict[str, str],
    steps: int | None,
    swap: dict[str, str] | None = None,
    *,
    fresh: bool = False,
    non_preemptible: bool = False,
) -> PresetMeta:
    return PresetMeta(
        preset=name,
        labels=run_labels,
        steps=steps,
        swap=swap or {},
        fresh=fresh,
        non_preemptible=non_preemptible,
    )


def swapped_label(label: str, swap: dict[str, str]) -> str:
    """A preset's run label with each swapped normalizer's name replaced ('layer, B=4' -> 'dyt, B=4')."""
    for old, new in swap.items():
        label = re.sub(rf"\b{re.escape(old)}\b", new, label)
    return label


def sweep_meta(varied: list[str], non_preemptible: bool = False) -> SweepMeta:
    return SweepMeta(varied=varied, non_preemptible=non_preemptible)


def _json(value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    return json.loads(value) if isinstance(value, str) else dict(value)


def varied_fields(specs: list[dict[str, Any]]) -> list[str]:
    """The spec fields whose values differ between runs (seed and probes left out)."""
    keys = sorted({k for s in specs for k in s} - SKIP_FIELDS)
    return [k for k in keys if len({json.dumps(s.get(k), sort_keys=True) for s in specs}) > 1]


def summarize(
    group_id: str,
    meta: GroupMeta | None,
    runs: Sequence[Mapping[str, Any]],
    curve_of: Callable[[str, str], list[tuple[int, float]]],
    metric: str | None = None,
) -> GroupPublic:
    """The group's public summary; `curve_of(run_id, field)` reads one validation curve."""
    specs = {r["id"]: _json(r["spec"]) for r in runs}
    labels = meta.labels if isinstance(meta, PresetMeta) else {}
    preset = PRESETS.get(meta.preset) if isinstance(meta, PresetMeta) else None
    kind = meta.kind if isinstance(meta, PresetMeta | SweepMeta) else "group"
    metric = metric or (preset.metric if preset else "val_loss")
    stored_varied = meta.varied if isinstance(meta, SweepMeta) else []
    varied = [] if preset else list(stored_varied or varied_fields(list(specs.values())))

    def arm_of(run_id: str) -> str:
        if preset:
            return labels.get(run_id, "?")
        spec = specs[run_id]
        return ", ".join(f"{k}={spec.get(k)}" for k in varied) or "all"

    swap = meta.swap if isinstance(meta, PresetMeta) else {}
    relabel = {lab: swapped_label(lab, swap) for lab in preset.run_labels()} if preset else {}
    order: list[str] = list(relabel.values())
    public_runs: list[GroupRun] = []
    records: dict[str, list[SeedRecord]] = {}
    arm_spec: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    field = curve_field(metric)
    for r in sorted(runs, key=lambda r: (specs[r["id"]].get("seed", 0), r["id"])):
        summary = _json(r.get("summary"))
        final_metrics = summary.get("metrics") or {}
        label, seed, status = arm_of(r["id"]), int(specs[r["id"]].get("seed", 0)), str(r["status"])
        counts[status] = counts.get(status, 0) + 1
        value = final_metrics.get(metric_key(metric))
        try:
            public_runs.append(
                GroupRun(
                    id=r["id"],
                    arm=label,
                    seed=seed,
                    status=status,
                    final=value,
                    metrics=final_metrics,
                )
            )
        except ValidationError as exc:
            raise StoredGroupError(
                f"group {group_id}: run {r['id']}'s stored summary is malformed ({problems(exc)})"
            ) from None
        if label not in order:
            order.append(label)
        arm_spec.setdefault(label, {k: v for k, v in specs[r["id"]].items() if k not in SKIP_FIELDS})
        if status in TERMINAL_STATUSES:
            records.setdefault(label, []).append(
                {
                    "seed": seed,
                    "status": status,
                    "value": value,
                    "curve": curve_of(r["id"], field),
                    "wall_time": summary.get("wall_time"),
                    "message": r.get("error"),
                    "traces": trace_stats(summary.get("probes")),
                }
            )
    arms = {
        label: aggregate(label, arm_spec.get(label, {}), records.get(label, []), metric)
        for label in order
        if label in arm_spec
    }
    out = GroupPublic(
        group_id=group_id,
        kind=kind,
        preset=preset.name if preset else None,
        title=preset.title if preset else None,
        expect=preset.expect if preset else None,
        setup=preset.setup if preset else None,
        metric=metric,
        higher_is_better=higher_is_better(metric),
        varied=varied,
        counts=counts,
        done=bool(runs) and all(str(r["status"]) in TERMINAL_STATUSES for r in runs),
        runs=public_runs,
        arms=[c.public() for c in arms.values()],
    )
    if preset and preset.scale_map:
        out.map = map_points(preset.scale_map, arms, metric)
    if preset and (preset.claims or not preset.scale_map):  # a map without claims is read from its points
        # arms with no finished seed yet are kept: their claims stay pending until the seeds are in
        launched = len({int(s.get("seed", 0)) for s in specs.values()})
        # a swap judges the preset's claims for the normalizer run in place of the preset's
        rules = [(kind, *(relabel.get(a, a) for a in args)) for kind, *args in preset.claims]
        verdict = judge_all(rules, arms, metric, preset.runs[0], expected=launched, preset=preset.name)
        out.claims = verdict.claims
        out.holds = verdict.holds
        out.all_seeds = verdict.all_seeds
        out.pending = verdict.pending
    return out
