"""Tuning rules: a preset's hyperparameter chosen on tuning seeds that never decide a verdict (torch-free).

A `Tuning` is declared in the preset (normlab/presets.py) before anything runs: one RunSpec field, a grid
of values and the tuning seeds (100–104 by default, disjoint from the verdict seeds 0–4). The rule is fixed:
each run of the preset (each normalizer) takes the grid value whose final metric, averaged over the tuning
seeds, is best; a value under which any tuning seed failed or diverged is ranked below every value that
finished on all of them; ties go to the earlier grid value. A map may be tuned per side instead
(`per="side"`): each of its two normalizers takes one value for all its axis points, averaged over the
points and the tuning seeds. `choose` applies the rule to the tuning runs' final
metrics and returns the tuning table. `normlab reproduce PRESET --tune` trains the grid on the tuning
seeds, then judges the claims on the verdict seeds at the chosen values, with the preset's own setting
(the paper's "same hyperparameters" comparison) beside it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from normlab.arms import is_number
from normlab.claims import higher_is_better

TUNING_SEEDS = (100, 101, 102, 103, 104)
TUNABLE = {"lr": "learning rate", "weight_decay": "weight decay", "momentum": "momentum"}


@dataclass(frozen=True)
class Tuning:
    """Each run of a preset at its best value of `field` from `grid`, judged on `seeds`."""

    field: str
    grid: tuple[float, ...]
    seeds: tuple[int, ...] = TUNING_SEEDS
    # "run": each run of the preset gets its own value; "side" (maps only): each side of the map gets one
    # value for every axis point, judged on the mean over its points and tuning seeds
    per: str = "run"

    def __post_init__(self) -> None:
        if self.field not in TUNABLE:
            raise ValueError(f"tuning field {self.field!r}: choose one of {', '.join(TUNABLE)}")
        if len(self.grid) < 2 or len(set(self.grid)) != len(self.grid):
            raise ValueError("a tuning grid needs at least two distinct values")
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("tuning needs at least two distinct seeds")
        if self.per not in ("run", "side"):
            raise ValueError(f"tuning per {self.per!r}: choose 'run' or 'side'")

    def rule(self, metric: str) -> str:
        better = "highest" if higher_is_better(metric) else "lowest"
        grid = ", ".join(f"{v:g}" for v in self.grid)
        seeds = ", ".join(map(str, self.seeds))
        who, over = (
            (
                "each normalizer of the map (one value for all its points)",
                f"over its points and tuning seeds {seeds}",
            )
            if self.per == "side"
            else ("each run", f"over tuning seeds {seeds}")
        )
        return (
            f"{who} at the {TUNABLE[self.field]} from {{{grid}}} with the {better} mean final {metric} "
            f"{over} (never a verdict seed); a value under which a tuning run failed or "
            "diverged ranks below every value that finished on all of them; ties go to the earlier value"
        )

    def public(self, metric: str) -> dict[str, Any]:
        return {
            "field": self.field,
            "grid": list(self.grid),
            "seeds": list(self.seeds),
            "per": self.per,
            "rule": self.rule(metric),
        }


def _score(values: list[Any], higher: bool) -> tuple[int, float]:
    """Sort key, smaller is better: (seeds that did not finish, the mean oriented so lower wins)."""
    done = [float(v) for v in values if is_number(v)]
    missing = len(values) - len(done)
    if not done:
        return missing, math.inf
    mean = statistics.fmean(done)
    return missing, -mean if higher else mean


def choose(tuning: Tuning, finals: dict[str, dict[float, list[Any]]], metric: str) -> dict[str, Any]:
    """The rule applied to the tuning runs' final metrics `finals[label][grid value]` (one per tuning seed,
    None for a failed run): {"chosen": {label: value}, "table": one row per (label, value) with its
    per-seed values, mean, seeds finished and whether it was chosen}."""
    higher = higher_is_better(metric)
    chosen: dict[str, float] = {}
    table = []
    for label, by_value in finals.items():
        scored = [
            (_score(by_value.get(v, [None] * len(tuning.seeds)), higher), i, v)
            for i, v in enumerate(tuning.grid)
        ]
        best = min(scored)[2]
        chosen[label] = best
        for v in tuning.grid:
            values = list(by_value.get(v, [None] * len(tuning.seeds)))
            done = [float(x) for x in values if is_number(x)]
            table.append(
                {
                    "label": label,
                    "value": v,
                    "values": values,
                    "finished": len(done),
                    "mean": statistics.fmean(done) if done else None,
                    "std": statistics.stdev(done) if len(done) > 1 else None,
                    "chosen": v == best,
                }
            )
    return {"chosen": chosen, "table": table}
