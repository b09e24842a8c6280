"""How long a preset takes on this server, from the measured run times of its earlier launches here (the
Presets page says it before Start; `GET /api/presets` serves it). Torch-free and pure: the store hands
over each launch's runs, this reduces them.

Only launches that ran the preset as it is defined count (a steps override or a swapped normalizer
changes the work); a fresh-seed replication does. Per arm (the preset's run label) the median seconds
from a completed run's start to its end; the launch's time on one worker is the sum over its runs × seeds
of those medians, an arm never timed counting at the median of every timed run. Separately, the latest
launch whose every run completed gives the time it took here, from its first start to its last end,
with however many workers the server had then."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from normlab_client.events import RunStatus
from normlab_client.group_models import PresetEstimate


@dataclass(frozen=True)
class TimedRun:
    label: str  # the preset's run label (its arm)
    status: str
    started_at: float | None
    finished_at: float | None

    def seconds(self) -> float | None:
        """Start to end of a completed run (None for any other run, or one without both times)."""
        if self.status != RunStatus.COMPLETED or self.started_at is None or self.finished_at is None:
            return None
        span = self.finished_at - self.started_at
        return span if span > 0 else None


@dataclass(frozen=True)
class Launch:
    created_at: float
    runs: list[TimedRun]


def estimate(labels: Sequence[str], seeds: int, launches: Sequence[Launch]) -> PresetEstimate | None:
    """The estimate for a launch of `labels` × `seeds` runs from the earlier `launches` (None when no run
    of them completed: nothing measured, nothing estimated)."""
    per_arm: dict[str, list[float]] = {}
    for launch in launches:
        for run in launch.runs:
            span = run.seconds()
            if span is not None:
                per_arm.setdefault(run.label, []).append(span)
    every = [s for spans in per_arm.values() for s in spans]
    if not every:
        return None
    typical = statistics.median(every)
    one_worker = seeds * sum(statistics.median(per_arm[lab]) if lab in per_arm else typical for lab in labels)
    whole = [
        launch for launch in launches if launch.runs and all(r.seconds() is not None for r in launch.runs)
    ]
    last = max(whole, key=lambda launch: launch.created_at, default=None)
    last_s = None
    if last is not None:
        starts = [r.started_at for r in last.runs if r.started_at is not None]
        ends = [r.finished_at for r in last.runs if r.finished_at is not None]
        last_s = max(ends) - min(starts)
    return PresetEstimate(measured=len(every), run_s=typical, one_worker_s=one_worker, last_launch_s=last_s)
