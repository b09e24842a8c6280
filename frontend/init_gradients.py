"""The gradient norm of each Transformer block at initialisation, as a figure (pure: log events in, a
figure dict out). The engine logs them at a run's first step, before any update (`layer_grad_norms` of a
`log` event): with post-LN the blocks next to the output weigh more than with pre-LN (Xiong et al.)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from frontend import figures


def layer_grad_norms(events: list[dict[str, Any]]) -> list[float] | None:
    """The first logged per-block gradient norms of a run's events, or None before they came."""
    for e in events:
        norms = (e.get("payload") or {}).get("layer_grad_norms")
        if e.get("kind") == "log" and isinstance(norms, list) and norms:
            return [float(v) for v in norms]
    return None


def init_gradient_figure(
    events: list[dict[str, Any]], norm: str = "layer", present: bool = False
) -> dict[str, Any]:
    """One bar per block, from the input side: ‖∂ℓ/∂W‖ over its weight matrices at initialisation."""
    fig = go.Figure()
    norms = layer_grad_norms(events)
    if norms is None:
        figures.empty(fig, "The gradient norms come with the run's first step.")
    else:
        blocks = [f"block {k + 1}" for k in range(len(norms))]
        fig.add_trace(
            go.Bar(
                x=blocks,
                y=norms,
                marker={"color": figures.norm_color(norm)},
                hovertemplate="%{x}: ‖∂ℓ/∂W‖ = %{y:.3g}<extra></extra>",
            )
        )
        fig.update_layout(
            xaxis={"title": "block (input → output)", "type": "category"},
            yaxis={"title": "‖∂ℓ/∂W‖ at initialisation", "rangemode": "tozero"},
            showlegend=False,
        )
    figure: dict[str, Any] = figures.apply_theme(fig, present, 260).to_dict()
    return figure
