"""A preset's or sweep's group as the pages show it (`GET /api/groups/{id}`): verdicts of the claims,
mean ± std bands per arm, and a sortable results table — pure functions of the API's answer
(`normlab_client.group_models.GroupPublic`)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import dcc, html
from dash.dash_table.DataTable import DataTable
from dash.dash_table.Format import Format, Scheme
from dash.development.base_component import Component

from frontend import claim_view, components, figures, judged_figure, map_figure
from frontend.figures import apply_theme
from normlab_client.group_models import Arm, GroupPublic, TraceName

claim_text = claim_view.claim_text  # the pages' one wording of a verdict

# good → bad, colour-blind safe (Okabe–Ito bluish green … vermillion), for the results table's cells
SCALE = ["#cdeee2", "#e4f2d9", "#f6efd2", "#fbe0cc", "#f7cdbd"]


def progress(group: GroupPublic) -> str:
    """'3 of 10 runs finished (2 running, 5 queued)' — or that every run ended."""
    counts = group.counts
    total = sum(counts.values())
    live = {k: v for k, v in counts.items() if k in ("queued", "running") and v}
    ended = total - sum(live.values())
    if group.done:
        return f"All {total} runs ended."
    rest = ", ".join(f"{v} {k}" for k, v in sorted(live.items()))
    return f"{ended} of {total} runs finished ({rest})."


def verdicts(group: GroupPublic, expect: bool = True) -> list[Component]:
    """The preset's expectation (unless `expect` is False: its card says it already), one line per
    claim (what it says, whether it held, the effect, the rule that decided it), and the progress."""
    out: list[Component] = []
    if expect and group.expect:
        out.append(html.Div(f"Expect: {group.expect}", className="expect"))
    for c in group.claims or []:
        state, mark = claim_view.state(c)
        out.append(
            html.Div(
                className=f"verdict {state}",
                children=[
                    html.Span(mark, className="mark"),
                    html.Strong(c.claim),
                    ": ",
                    claim_view.claim_text(c),
                    *claim_view.claim_details(c),
                ],
            )
        )
    out.append(html.Div(progress(group), className="muted progress"))
    return out


def arm_color(arm: Arm, index: int) -> str:
    """An arm's colour on every card: its normalizer's, else the index-th of the ordinal palette."""
    return figures.arm_color(arm.spec.get("norm"), index)


def band_figure(group: GroupPublic, present: bool = False, height: int = 360) -> dict[str, Any]:
    """Mean ± std over seeds per arm, of the group's metric along training (one band per arm)."""
    fig = go.Figure()
    metric = group.metric
    for k, arm in enumerate(group.arms):
        steps, mean, std = arm.curve.steps, arm.curve.mean, arm.curve.std
        if not steps:
            continue
        color = arm_color(arm, k)
        lo = [m - s for m, s in zip(mean, std, strict=False)]
        hi = [m + s for m, s in zip(mean, std, strict=False)]
        fig.add_trace(
            go.Scatter(
                x=list(steps) + list(steps)[::-1],
                y=hi + lo[::-1],
                mode="lines",
                fill="toself",
                fillcolor=color,
                opacity=0.2,
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=arm.label,
                meta=f"{arm.label}:band",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=mean,
                mode="lines" if len(steps) > 20 else "lines+markers",
                name=f"{arm.label} (n={arm.n})",
                line={"color": color, "width": 2},
                legendgroup=arm.label,
                meta=arm.label,
                customdata=std,
                hovertemplate=f"<b>{arm.label}</b><br>step %{{x}}<br>{metric} mean %{{y:.4g}}"
                " ± %{customdata:.2g}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="training step")
    # two short lines: one long line ran past a small card's plot and was clipped
    fig.update_yaxes(title_text=f"{metric}<br>mean ± std over seeds")
    if not fig.data:
        figures.empty(fig, "No finished seed yet: the bands appear as runs end.")
    apply_theme(fig, present, height=height)
    # the legend under the x-axis title, never over it: a fixed pixel offset below the plot, and a
    # bottom margin with room for its rows (about three entries a row on a preset card)
    entries = sum(1 for t in fig.data if t.showlegend is not False)
    row_px, below_px = (30, 80) if present else (20, 56)
    margin = {"l": 90 if present else 70, "r": 20, "t": 20, "b": below_px + row_px * max(1, -(-entries // 3))}
    total = fig.layout.height
    fig.update_layout(
        margin=margin,
        legend={"y": -below_px / max(total - margin["t"] - margin["b"], 40), "yanchor": "top"},
        uirevision="group-bands",
    )
    plotly_json: dict[str, Any] = fig.to_plotly_json()
    return plotly_json


def results_rows(group: GroupPublic) -> list[dict[str, Any]]:
    """One row per arm: the varied fields (or the preset's label), n, mean and std of the final metric."""
    rows = []
    for arm in group.arms:
        row: dict[str, Any] = {"arm": arm.label, "n": arm.n, "mean": arm.mean, "std": arm.std}
        for field in group.varied:
            row[field] = arm.spec.get(field)
        rows.append(row)
    return rows


def _shade(rows: list[dict[str, Any]], higher_is_better: bool) -> list[dict[str, Any]]:
    """Background per row by its mean's rank: best green … worst vermillion (the number is shown too)."""
    ranked = sorted(
        (r["mean"] for r in rows if isinstance(r.get("mean"), int | float)), reverse=higher_is_better
    )
    styles = []
    for i, value in enumerate(ranked):
        shade = SCALE[min(len(SCALE) - 1, i * len(SCALE) // max(len(ranked), 1))]
        styles.append({"if": {"filter_query": f"{{mean}} = {value!r}"}, "backgroundColor": shade})
    return styles


def results_table(group: GroupPublic, table_id: str) -> DataTable:
    """A sweep's arms × mean ± std of the final metric, sortable (numbers sort as numbers), coloured."""
    rows = results_rows(group)
    metric = group.metric
    num = Format(precision=4, scheme=Scheme.decimal)  # type: ignore[no-untyped-call]  # dash's Format
    cols: list[Any] = [
        {
            "name": f,
            "id": f,
            "type": "numeric" if isinstance(rows[0].get(f) if rows else None, int | float) else "text",
        }
        for f in group.varied
    ] or [{"name": "arm", "id": "arm"}]
    cols += [
        {"name": f"{metric} mean", "id": "mean", "type": "numeric", "format": num},
        {"name": "± std", "id": "std", "type": "numeric", "format": num},
        {"name": "seeds", "id": "n", "type": "numeric"},
    ]
    return DataTable(
        id=table_id,
        # dash's annotation leaves out None, which a DataTable shows as an empty arm (no finished seed)
        data=rows,  # type: ignore[arg-type]
        columns=cols,
        sort_action="native",
        sort_by=[{"column_id": "mean", "direction": "desc" if group.higher_is_better else "asc"}],
        style_as_list_view=True,
        style_header={"fontWeight": 600, "background": "#f4f6f8"},
        style_cell={"fontFamily": "system-ui, sans-serif", "fontSize": 14, "padding": "6px 10px"},
        style_data_conditional=_shade(rows, group.higher_is_better),
    )


def judged_graph(group: GroupPublic, key: TraceName, present: bool = False, height: int = 240) -> dcc.Graph:
    """One hidden-state figure the group's claims judge, per arm (frontend/judged_figure.py), at a fixed
    height (a responsive plot sized itself after its card had been laid out, and ran over the next)."""
    config: dcc.Graph.Config = {**components.GRAPH_CONFIG, "responsive": False}
    total = height + (120 if present else 0)  # apply_theme's presentation height
    return dcc.Graph(
        figure=judged_figure.judged_figure(group, key, present, height=height),
        config=config,
        style={"height": f"{total}px"},
        className=f"preset-judged judged-{key}",
    )


def group_card(group: GroupPublic, ids_: dict[str, str], present: bool = False) -> list[Component]:
    """The group's card on Compare: title, verdicts, bands, and (a sweep) the results table."""
    title = group.title or (f"Sweep over {', '.join(group.varied)}" if group.varied else "Group")
    out: list[Component] = [
        html.H2(title),
        html.Div(verdicts(group), id=ids_["verdicts"]),
        dcc.Graph(
            id=ids_["bands"],
            figure=band_figure(group, present),
            className="graph",
            config=components.GRAPH_CONFIG,
        ),
    ]
    if group.map is not None:  # a map preset: its effect per axis value beside the bands
        out.append(map_figure.map_graph(group.map, present))
    # a claim on a hidden-state figure (η·λ_max, the angular update, …): that figure per arm
    out += [judged_graph(group, key, present) for key in judged_figure.trace_keys(group)]
    if group.kind != "preset":
        out.append(
            html.Div(results_table(group, ids_["table"]), id=ids_["table_box"], className="table-card")
        )
    return out
