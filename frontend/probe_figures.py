"""Plotly figures of a run's Fisher probes (pure functions: the run's `fisher` events in, figure dict out):
the curvature per layer and per scale-invariant weight set. The hidden-state heatmaps are in
`frontend/hidden_figures.py`."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from frontend import figures, probe_names, theory_lines
from normlab_client.events import fisher_weight_sets

# Fisher panel: layers and weight sets are names, not an order: neighbours get clearly different hues
# (Okabe–Ito again), and a name keeps its hue in every subplot.
CATEGORY = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442"]


def _weight_set_series(events: list[dict[str, Any]], field: str) -> list[tuple[str, list[float | None]]]:
    """(name, values per event) for each scale-invariant set; past 8 sets, min / median / max."""
    names: list[str] = []
    for e in events:
        for g in fisher_weight_sets(e["payload"]):
            if g["name"] not in names:
                names.append(g["name"])
    per = [{g["name"]: g.get(field) for g in fisher_weight_sets(e["payload"])} for e in events]
    if len(names) <= 8:
        return [(n, [p.get(n) for p in per]) for n in names]
    out = []
    for label, pick in (("min", min), ("median", lambda v: sorted(v)[len(v) // 2]), ("max", max)):
        ys = []
        for p in per:
            vals = [v for v in p.values() if v is not None]
            ys.append(pick(vals) if vals else None)
        out.append((f"{label} of {len(names)} weight sets", ys))
    return out


def _has(events: list[dict[str, Any]], field: str) -> bool:
    return any(g.get(field) is not None for e in events for g in fisher_weight_sets(e["payload"]))


def _step_panel(events: list[dict[str, Any]]) -> tuple[str, str]:
    """(field, title) of the effective-step panel: the measured ‖Δw‖/‖w‖ per update when the run
    reports it (labelled by its optimizer), else η/‖w‖² (the step plain SGD would take)."""
    if _has(events, "effective_step"):
        opt = events[-1]["payload"].get("optimizer") or next(
            (g.get("optimizer") for g in fisher_weight_sets(events[-1]["payload"]) if g.get("optimizer")), ""
        )
        return "effective_step", f"Effective step ‖Δw‖/‖w‖ per update{f' ({opt}, measured)' if opt else ''}"
    return "effective_lr", "Effective learning rate η/‖w‖² (plain SGD's step)"


def fisher_figure(
    events: list[dict[str, Any]],
    present: bool = False,
    ended: bool | None = False,
    blocked: bool = False,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fisher curvature over training. Top row, per layer: the Fisher trace, and η·λ_max against the
    stability line 2. Below, per scale-invariant weight set: ‖w‖, the effective step, uᵀFu along w and
    the gain curvature. One legend a row, right of it; a layer or set keeps its colour everywhere.
    `ended`: the run ended and its stored events were all read; None while they load.
    `blocked`: the run warned that no estimate fits its budget (the empty panel then points to it).
    `spec`: the run's resolved spec, for the theory lines that apply to it (frontend.theory_lines)."""
    events = [e for e in events if e.get("kind", "fisher") == "fisher"]
    step_field, step_title = _step_panel(events)
    titles = [
        "Fisher trace per layer",
        "η·λ_max against 2 (stable below)",
        "‖w‖ per weight set",
        step_title,
        "uᵀFu along w (→ 0 when scale-invariant)",
        "Gain curvature per weight set",
    ]
    fig = make_subplots(rows=3, cols=2, vertical_spacing=0.11, horizontal_spacing=0.14, subplot_titles=titles)
    steps = [e["step"] for e in events]
    if not events:
        why = (
            "No Fisher estimate fits this run's probe budget: see the warning above."
            if blocked
            else "This run recorded no Fisher estimates."
            if ended
            else "Loading the run's Fisher estimates…"
            if ended is None
            else "Waiting for the first Fisher estimate…"
        )
        figures.empty(fig, why)
        figures.apply_theme(fig, present, height=160)
        empty_figure: dict[str, Any] = fig.to_plotly_json()
        return empty_figure
    last = events[-1]["payload"]
    estimators = last.get("trace_estimator", {})
    weight_set_names = [name for name, _ in _weight_set_series(events, "weight_norm")]
    cell = probe_names.cell_of([*last.get("trace", {}), *weight_set_names])
    for k, layer in enumerate(last.get("trace", {})):
        # plain words in the legend; the module path and how it was estimated in the hover
        how = probe_names.estimator_words(estimators.get(layer))
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[e["payload"].get("trace", {}).get(layer) for e in events],
                name=probe_names.plain_name(layer, cell),
                legend="legend",
                line={"color": CATEGORY[k % 8]},
                hovertemplate=f"{layer} ({how})<br>step %{{x}}: %{{y:.3g}}<extra></extra>",
            ),
            row=1,
            col=1,
        )
    _eta_lambda(fig, events, steps)
    for legend, (row, col), field in (
        ("legend3", (2, 1), "weight_norm"),
        ("legend4", (2, 2), step_field),
        ("legend5", (3, 1), "along_w_curvature"),
        ("legend6", (3, 2), "gain_curvature"),
    ):
        for name, ys in _weight_set_series(events, field):
            k = weight_set_names.index(name) if name in weight_set_names else len(weight_set_names)
            fig.add_trace(
                go.Scatter(
                    x=steps,
                    y=ys,
                    name=probe_names.plain_name(name.removesuffix(".weight"), cell)
                    if name.endswith(".weight")
                    else probe_names.plain_name(name, cell),
                    legend=legend,
                    line={"color": CATEGORY[k % 8]},
                    hovertemplate=f"{name}<br>step %{{x}}: %{{y:.3g}}<extra></extra>",
                ),
                row=row,
                col=col,
            )
    if step_field == "effective_step":
        theory_lines.draw_angular(fig, spec, steps, row=2, col=2, legend="legend4")
    colors = {name: CATEGORY[k % 8] for k, name in enumerate(weight_set_names)}
    theory_lines.draw_norm_growth(fig, spec, events, colors, row=2, col=1, legend="legend3")
    theory_lines.draw_zero_curvature(fig, events, row=3, col=1, legend="legend5")
    fig.update_xaxes(title_text="training step")
    for (row, col), title in probe_names.FISHER_AXES.items():
        fig.update_yaxes(title_text=title, row=row, col=col)
    traces = (v for e in events for v in (e["payload"].get("trace") or {}).values())
    fig.update_yaxes(type="log", row=1, col=1, **figures.log_ticks(traces))
    fig.update_yaxes(
        type="log",
        row=2,
        col=2,
        **figures.log_ticks(g.get(step_field) for e in events for g in fisher_weight_sets(e["payload"])),
    )
    fig.update_yaxes(exponentformat="power", row=3, col=1)
    figures.apply_theme(fig, present, height=900)
    _place_legends(fig, present)
    cost = last.get("cost_steps")
    note = "Hover a line for its module and how it was estimated"
    if cost is not None:
        note += f" · each estimate costs ≈ {cost:.2g} training steps"
    if last.get("empirical") is not None:
        note += " · empirical Fisher also recorded (labelled as such)"
    fig.update_layout(title={"text": note, "font": {"size": 12}, "x": 0})
    figure: dict[str, Any] = fig.to_plotly_json()
    return figure


def _eta_lambda(fig: go.Figure, events: list[dict[str, Any]], steps: list[int]) -> None:
    """η·λ_max(F) (and of the Hessian when measured) with the line 2 that gradient descent crosses when it
    stops being stable."""
    fig.add_trace(
        go.Scatter(
            x=steps,
            y=[e["payload"].get("eta_lambda_max") for e in events],
            name="η·λ_max(F)",
            legend="legend2",
            line={"color": "#0072B2"},
            **bound_markers(events, "lambda_max"),
        ),
        row=1,
        col=2,
    )
    hess = [e["payload"].get("eta_hessian_lambda_max") for e in events]
    derived = any(e["payload"].get("hessian_lambda_max") is not None for e in events)
    if all(h is None for h in hess) and derived:
        hess = []
        for e in events:
            p = e["payload"]
            lr = p.get("eta_lambda_max", 0) / p["lambda_max"] if p.get("lambda_max") else None
            h = p.get("hessian_lambda_max")
            hess.append(h * lr if h is not None and lr is not None else None)
    if any(h is not None for h in hess):
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=hess,
                name="η·λ_max(Hessian)",
                legend="legend2",
                line={"color": "#D55E00", "dash": "dot"},
                **bound_markers(events, "hessian_lambda_max"),
            ),
            row=1,
            col=2,
        )
    fig.add_trace(
        go.Scatter(
            x=[steps[0], steps[-1]] if steps else [],
            y=[2.0, 2.0],
            mode="lines",
            name="2: stability line",
            legend="legend2",
            hoverinfo="skip",
            line={"color": "#D55E00", "dash": "dash", "width": 1},
        ),
        row=1,
        col=2,
    )
    # the line stays in view even while η·λ is far below it
    values = [v for v in [*(e["payload"].get("eta_lambda_max") for e in events), *hess] if v is not None]
    fig.update_yaxes(range=[0, max([2.3, *values]) * 1.08], row=1, col=2)


def bound_markers(events: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Scatter keywords marking each estimate: a filled dot when λ_max is within its tolerance, an open
    one with a hover text when the probe stopped short of it (a lower bound; docs/probes.md)."""
    symbols, texts = [], []
    for e in events:
        p = e["payload"]
        short = bool(p.get(f"{key}_lower_bound"))
        symbols.append("circle-open" if short else "circle")
        bound = p.get(f"{key}_rel_bound")
        tolerance = p.get("lambda_tolerance")
        if short:
            texts.append(f"lower bound: λ_max may be up to {bound:.0%} higher (not within {tolerance:.0%})")
        elif bound is not None and tolerance is not None:
            texts.append(f"within {tolerance:.0%} of λ_max (bound {bound:.1%})")
        else:
            texts.append("")
    return {
        "mode": "lines+markers",
        "marker": {"symbol": symbols, "size": 7},
        "hovertext": texts,
    }


# A row's two subplots show the same layers (row 1) or weight sets (rows 2, 3) in the same colours: one
# legend a row, right of the right column, where it cannot cover the other column's axis title.
ROW_LEGEND = {"legend2": "legend", "legend4": "legend3", "legend6": "legend5"}


def _place_legends(fig: go.Figure, present: bool) -> None:
    """One legend per row, right of the figure at the row's top: the right subplot's entries fold into
    the left one's (an entry named twice is shown once; theory lines keep theirs)."""
    size = 16 if present else 11
    named: dict[str, set[str]] = {legend: set() for legend in ("legend", "legend3", "legend5")}
    for trace in fig.data:
        legend = trace.legend or "legend"
        if legend in named and trace.showlegend is not False:
            named[legend].add(trace.name)
    for trace in fig.data:
        legend = trace.legend or "legend"
        if legend in ROW_LEGEND:
            target = ROW_LEGEND[legend]
            if trace.name in named[target]:
                trace.showlegend = False
            named[target].add(trace.name)
            trace.legend = target
    for n, legend in ((1, "legend"), (3, "legend3"), (5, "legend5")):
        yaxis = fig.layout[f"yaxis{'' if n == 1 else n}"]
        fig.update_layout(
            {
                legend: {
                    "x": 1.02,
                    "xanchor": "left",
                    "y": yaxis.domain[1],
                    "yanchor": "top",
                    "orientation": "v",
                    "font": {"size": size},
                    "bgcolor": "rgba(255,255,255,0.85)",
                }
            }
        )
    fig.update_layout(showlegend=True, margin={"r": 280 if present else 200, "t": 80})
