"""The quantity a preset's claims judge, drawn per arm on its card (pure: the group in, figures out).

A claim judges one number per seed (normlab.claim_kinds.QUANTITY): the final metric, the area under the
curve, or a hidden-state figure such as η·λ_max over the second half of training. For the final metric
the card keeps its mean ± std bands along training (their right end is what is judged); for a
hidden-state figure it draws, per arm, every seed's number, their mean and its interval
mean ± t(0.95, n−1)·SE (the claims' own rule, normlab.claim_rules), and the theory line the claim holds it
to (2 for the edge of stability, √(2ηλ/(1+μ)) for the angular update under weight decay, 0 for a decay
in orders of magnitude) with its margin shaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import plotly.graph_objects as go

from frontend import figures
from normlab.arms import START, is_number
from normlab.claim_kinds import QUANTITY, Quantity
from normlab.claim_rules import EDGE_REL, LINE_REL, interval
from normlab.theory import angular_equilibrium
from normlab_client.group_models import Arm, GroupPublic, TraceName


@dataclass(frozen=True)
class Judged:
    """How a hidden-state figure is drawn: its axis title, the line a claim holds it to and the margin."""

    title: str
    line: str | None = None  # "edge" (2), "equilibrium" (√(2ηλ/(1+μ)) of the arm's spec), "zero"
    margin: float | None = None  # relative margin around the line (a TOST claim), None for a bound


TRACES: dict[TraceName, Judged] = {
    "eta_lambda_late": Judged("η·λ_max (2nd half, mean)", "edge", EDGE_REL),
    "angular_late": Judged("angular update (rad/step, 2nd half)", "equilibrium", LINE_REL),
    "elr_orders": Judged("log₁₀ η/‖w‖² last ÷ first", "zero"),
    "hidden_spread_late": Judged(f"‖h_t‖ max ÷ min (t ≥ {START})"),
    "grad_orders": Judged("log₁₀ ‖∂ℓ/∂h_t‖ last t ÷ first t"),
}


def judged_quantities(group: GroupPublic) -> list[Quantity]:
    """The quantities the group's claims judge, in the claims' order, each once."""
    out: list[Quantity] = []
    for claim in group.claims or []:
        key = QUANTITY.get(claim.kind)
        if key is not None and key not in out:
            out.append(key)
    return out


def draws_bands(group: GroupPublic) -> bool:
    """Whether the card draws the metric's bands: some claim judges the final metric or its curve (or
    the preset has no claim)."""
    keys = judged_quantities(group)
    return not keys or any(k in ("value", "auc") for k in keys)


def trace_keys(group: GroupPublic) -> list[TraceName]:
    """The hidden-state figures the claims judge (each drawn in a panel of its own)."""
    return [cast(TraceName, k) for k in judged_quantities(group) if k in TRACES]


def line_of(key: TraceName, arm: Arm) -> float | None:
    """The theory line a claim holds the arm's `key` to (None where there is none for this arm)."""
    kind = TRACES[key].line
    if kind == "edge":
        return 2.0
    if kind == "zero":
        return 0.0
    if kind == "equilibrium":
        lr, wd, mom = (arm.spec.get(k) for k in ("lr", "weight_decay", "momentum"))
        return angular_equilibrium(lr, wd, mom or 0.0) if lr and wd else None
    return None


def arm_numbers(arm: Arm, key: TraceName) -> dict[str, Any]:
    """The arm's per-seed numbers of `key` and their mean ± t·SE ("interval" None below two seeds)."""
    trace = arm.traces.get(key)
    values = [v for v in (trace.values if trace else []) if is_number(v)]
    return {"values": values, **interval(values)}


def judged_figure(
    group: GroupPublic, key: TraceName, present: bool = False, height: int = 240
) -> dict[str, Any]:
    """One panel: per arm its seeds' `key` (dots), the mean with its t interval (a diamond and a bar) and
    the claim's line with its margin (a short dashed segment over the arm, the margin shaded)."""
    spec = TRACES[key]
    fig = go.Figure()
    labels = [arm.label for arm in group.arms]
    reach: list[float] = []  # every y the panel must show: seeds, intervals, lines and their margins
    for k, arm in enumerate(group.arms):
        nums = arm_numbers(arm, key)
        reach += nums["values"] + (nums["interval"] or [])
        color = figures.arm_color(arm.spec.get("norm"), k)  # the arm's colour in its bands
        if nums["values"]:
            fig.add_trace(
                go.Scatter(
                    x=[arm.label] * len(nums["values"]),
                    y=nums["values"],
                    mode="markers",
                    marker={"color": color, "size": 7, "opacity": 0.45},
                    name=f"{arm.label} seeds",
                    meta=f"{arm.label}:seeds",
                    hovertemplate=f"<b>{arm.label}</b> one seed: %{{y:.4g}}<extra></extra>",
                )
            )
            span = nums["interval"]
            half = None if span is None else (span[1] - span[0]) / 2
            fig.add_trace(
                go.Scatter(
                    x=[arm.label],
                    y=[nums["difference"]],
                    mode="markers",
                    marker={"color": color, "size": 13, "symbol": "diamond", "line": {"width": 1}},
                    error_y={"type": "data", "array": [half or 0.0], "visible": half is not None},
                    name=f"{arm.label} mean (n={nums['n']})",
                    meta=f"{arm.label}:mean",
                    hovertemplate=f"<b>{arm.label}</b> mean %{{y:.4g}}"
                    + (f" ± {half:.2g} (t·SE, n = {nums['n']})" if half is not None else " (one seed)")
                    + "<extra></extra>",
                )
            )
        line = line_of(key, arm)
        if line is None:
            continue
        x0, x1 = k - 0.4, k + 0.4  # category k sits at k on the axis
        if spec.margin:
            lo, hi = sorted((line * (1 - spec.margin), line * (1 + spec.margin)))
            fig.add_shape(
                type="rect", x0=x0, x1=x1, y0=lo, y1=hi, fillcolor="#888", opacity=0.15, line_width=0
            )
            reach += [lo, hi]
        reach.append(line)
        fig.add_shape(type="line", x0=x0, x1=x1, y0=line, y1=line, line={"color": "#333", "dash": "dash"})
    fig.update_xaxes(type="category", categoryarray=labels, range=[-0.6, len(labels) - 0.4])
    fig.update_yaxes(title_text=spec.title)
    if reach:  # a margin of air above and below, so a shaded margin never fills the whole panel
        pad = 0.15 * (max(reach) - min(reach)) or 0.1 * abs(max(reach)) or 0.1
        fig.update_yaxes(range=[min(reach) - pad, max(reach) + pad])
    if not any(t.y for t in fig.data):
        figures.empty(fig, "No finished seed with this number yet.")
    figures.apply_theme(fig, present, height=height)
    fig.update_layout(
        showlegend=False,
        margin={"l": 100 if present else 70, "r": 10, "t": 10, "b": 60 if present else 40},
        uirevision=f"judged-{key}",
    )
    figure: dict[str, Any] = fig.to_plotly_json()
    return figure
