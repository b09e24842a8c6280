""" "Where does it help?" maps: one paired comparison (A vs B) repeated along a scale axis of the spec.

Torch-free. A `ScaleMap` names the axis (a RunSpec field: seq_len, batch_size, layers, lr), its values,
the two normalizers and, optionally, fields set on one side's runs only (`a_spec`, `b_spec`: e.g. each
normalizer at its own tuned learning rate); `normlab.presets` expands it into an ordinary preset (one run
label per normalizer and axis value, e.g. "layer seq_len=256"), so it launches, stores and aggregates
like any other. `map_points` turns the preset's arms into one effect per axis value: Δ = A − B paired
by seed, its paired standard error, and which side of zero it lies on beyond Z·SE. The claim's side is
where A beats B (below zero when a lower metric is better). Points of arms with no finished seed have
n = 0, so the map fills in as runs end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from normlab.arms import is_number
from normlab.claims import Z, effect, higher_is_better
from normlab_client.group_models import CellResult, MapPoint, ScaleMapPublic

AXES = {"seq_len": "T", "batch_size": "batch", "layers": "depth", "lr": "η"}


@dataclass(frozen=True)
class ScaleMap:
    """One comparison `a` vs `b` (normalizer names) at each value of the spec field `axis`; `a_spec` and
    `b_spec` set RunSpec fields on that side's runs only (the same at every axis value)."""

    axis: str
    values: tuple[Any, ...]
    a: str
    b: str
    a_spec: Mapping[str, Any] = field(default_factory=dict, hash=False)
    b_spec: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.axis not in AXES:
            raise ValueError(f"map axis {self.axis!r}: choose one of {', '.join(AXES)}")
        if len(set(self.values)) != len(self.values) or not self.values:
            raise ValueError("map values must be distinct and at least one")
        for fixed in ("norm", self.axis):
            if fixed in self.a_spec or fixed in self.b_spec:
                raise ValueError(f"a side's spec cannot set {fixed!r}: the map sets it on every run")

    def side_spec(self, norm: str) -> dict[str, Any]:
        """The fields set on `norm`'s runs only (empty for a side without any)."""
        return dict(self.a_spec if norm == self.a else self.b_spec if norm == self.b else {})

    def label(self, norm: str, value: Any) -> str:
        return f"{norm} {self.axis}={value}"

    def public(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "axis_name": AXES[self.axis],
            "values": list(self.values),
            "a": self.a,
            "b": self.b,
            "a_spec": dict(self.a_spec),
            "b_spec": dict(self.b_spec),
        }


def side(
    difference: float | None, se: float | None, lower_is_better: bool
) -> Literal["a", "b", "neither"] | None:
    """Which run the point favours beyond Z·SE: "a", "b" or "neither" (None without data)."""
    if difference is None or se is None:
        return None
    if abs(difference) <= Z * se or difference == 0:
        return "neither"
    a_wins = difference < 0 if lower_is_better else difference > 0
    return "a" if a_wins else "b"


def _per_seed(arm: CellResult | None) -> dict[int, float | None]:
    if arm is None:
        return {}
    return dict(zip(arm.seeds, arm.values, strict=False))


def map_points(scale_map: ScaleMap, arms: dict[str, CellResult], metric: str) -> ScaleMapPublic:
    """The map's public shape: its axis, the claim's side of zero, and per axis value the mean of
    A − B over seeds where both ended finite, its paired standard error, n, the per-seed differences
    and the run it favours."""
    lower = not higher_is_better(metric)
    points = []
    for value in scale_map.values:
        pa = _per_seed(arms.get(scale_map.label(scale_map.a, value)))
        pb = _per_seed(arms.get(scale_map.label(scale_map.b, value)))
        diffs = []
        for s in sorted(pa):
            x, y = pa[s], pb.get(s)
            if s in pb and is_number(x) and is_number(y):
                diffs.append(x - y)
        eff = effect(diffs)
        points.append(
            MapPoint(
                value=value,
                difference=eff.difference,
                se=eff.se,
                n=eff.n,
                per_seed=diffs,
                favours=side(eff.difference, eff.se, lower),
            )
        )
    return ScaleMapPublic(
        axis=scale_map.axis,
        axis_name=AXES[scale_map.axis],
        values=list(scale_map.values),
        a=scale_map.a,
        b=scale_map.b,
        metric=metric,
        claim_side="below" if lower else "above",
        z=Z,
        points=points,
    )
