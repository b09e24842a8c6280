"""A preset's or sweep's group as the pages show it (`GET /api/groups/{id}`): verdicts of the claims,
mean ± std bands per cell, and a sortable results table — pure functions from the API's JSON."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from dash import dcc, html
from dash.dash_table.DataTable import DataTable
from dash.dash_table.Format import Format, Scheme

from frontend import components, figures, map_figure
from frontend.figures import ORDINAL_COLORS, apply_theme
from normlab.catalog import NORMS
from normlab.claims import MIN_SEEDS

# good → bad, colour-blind safe (Okabe–Ito bluish green … vermillion), for the results table's cells
SCALE = ["#cdeee2", "#e4f2d9", "#f6efd2", "#fbe0cc", "#f7cdbd"]


def _num(v: Any, digits: int = 2) -> str:
    if not isinstance(v, int | float) or not math.isfinite(v):
        return "–"
    return f"{v:.{digits}g}" if abs(v) < 1e-3 and v != 0 else f"{v:+.{digits}f}".replace("-", "−")


def progress(group: dict) -> str:
    """'3 of 10 runs finished (2 running, 5 queued)' — or that every run ended."""
    counts = group.get("counts") or {}
    total = sum(counts.values())
    live = {k: v for k, v in counts.items() if k in ("queued", "running") and v}
    ended = total - sum(live.values())
    if group.get("done"):
        return f"All {total} runs ended."
    rest = ", ".join(f"{v} {k}" for k, v in sorted(live.items()))
    return f"{ended} of {total} runs finished ({rest})."


def pending_text(claim: dict) -> str:
    """'pending — 3 of 5 seeds in' (or why no more seeds will settle it)."""
    got, want = claim.get("seeds_in") or 0, claim.get("seeds_expected")
    text = (
        f"pending — {got} of {want} seeds in" if want else f"pending — {got} seed{'s' if got != 1 else ''} in"
    )
    if want is not None and got >= want and got < MIN_SEEDS:
        text += f"; a standard error needs {MIN_SEEDS} seeds: launch the preset with more"
    return text


def claim_text(claim: dict) -> str:
    """'holds on all 5 seeds — Δ = −0.14 ± 0.02' (the effect and its paired standard error), or, while
    too few seeds are in for a verdict, 'pending — 3 of 5 seeds in'."""
    if claim.get("pending"):
        return pending_text(claim)
    n = claim.get("n")
    seeds = f"{n} seed{'s' if n != 1 else ''}" if isinstance(n, int) else "the finished seeds"
    if claim.get("holds") and claim.get("all_seeds"):
        verdict = f"holds on all {seeds}" if isinstance(n, int) else "holds on every seed"
    elif claim.get("holds"):
        verdict = f"holds on the mean of {seeds}, not on every seed"
    else:
        verdict = f"does not hold ({seeds})"
    got, want = claim.get("seeds_in"), claim.get("seeds_expected")
    if isinstance(got, int) and isinstance(want, int) and got < want:
        verdict += f" so far ({got} of {want} seeds in)"
    effect = ""
    if isinstance(claim.get("difference"), int | float):
        effect = f" — Δ = {_num(claim['difference'])}"
        if isinstance(claim.get("se"), int | float):
            effect += f" ± {_num(claim['se']).lstrip('+')}"
    return verdict + effect


def verdicts(group: dict, expect: bool = True) -> list:
    """The preset's expectation (unless `expect` is False: its card says it already), one line per
    claim (what it says, whether it held, the effect, the rule that decided it), and the progress."""
    claims = group.get("claims") or []
    out: list = []
    if expect and group.get("expect"):
        out.append(html.Div(f"Expect: {group['expect']}", className="expect"))
    for c in claims:
        ok, wait = bool(c.get("holds")), bool(c.get("pending"))
        state, mark = ("pending", "… ") if wait else ("holds", "✓ ") if ok else ("fails", "✗ ")
        out.append(
            html.Div(
                className=f"verdict {state}",
                children=[
                    html.Span(mark, className="mark"),
                    html.Strong(c.get("claim", "")),
                    ": ",
                    claim_text(c),
                    html.Div(f"rule: {c.get('rule', '')}", className="muted rule"),
                ],
            )
        )
    out.append(html.Div(progress(group), className="muted progress"))
    return out


def _cell_color(cell: dict, index: int) -> str:
    norm = (cell.get("spec") or {}).get("norm")
    return figures.norm_color(norm) if norm in NORMS else ORDINAL_COLORS[index % len(ORDINAL_COLORS)]


def band_figure(group: dict, present: bool = False, height: int = 360) -> dict:
    """Mean ± std over seeds per cell, of the group's metric along training (one band per cell)."""
    fig = go.Figure()
    metric = group.get("metric", "val_loss")
    for k, cell in enumerate(group.get("cells") or []):
        curve = cell.get("curve") or {}
        steps, mean, std = curve.get("steps") or [], curve.get("mean") or [], curve.get("std") or []
        if not steps:
            continue
        color = _cell_color(cell, k)
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
                legendgroup=cell["label"],
                meta=f"{cell['label']}:band",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=mean,
                mode="lines" if len(steps) > 20 else "lines+markers",
                name=f"{cell['label']} (n={cell.get('n', 0)})",
                line={"color": color, "width": 2},
                legendgroup=cell["label"],
                meta=cell["label"],
                customdata=std,
                hovertemplate=f"<b>{cell['label']}</b><br>step %{{x}}<br>{metric} mean %{{y:.4g}}"
                " ± %{customdata:.2g}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="training step")
    fig.update_yaxes(title_text=f"{metric} (mean ± std over seeds)")
    if not fig.data:
        figures.empty(fig, "No finished seed yet: the bands appear as runs end.")
    apply_theme(fig, present, height=height)
    fig.update_layout(uirevision="group-bands")
    return fig.to_plotly_json()


def results_rows(group: dict) -> list[dict]:
    """One row per cell: the varied fields (or the preset's label), n, mean and std of the final metric."""
    rows = []
    for cell in group.get("cells") or []:
        spec = cell.get("spec") or {}
        row: dict[str, Any] = {
            "cell": cell["label"],
            "n": cell.get("n", 0),
            "mean": cell.get("mean"),
            "std": cell.get("std"),
        }
        for field in group.get("varied") or []:
            row[field] = spec.get(field)
        rows.append(row)
    return rows


def _shade(rows: list[dict], higher_is_better: bool) -> list[dict]:
    """Background per row by its mean's rank: best green … worst vermillion (the number is shown too)."""
    ranked = sorted(
        (r["mean"] for r in rows if isinstance(r.get("mean"), int | float)), reverse=higher_is_better
    )
    styles = []
    for i, value in enumerate(ranked):
        shade = SCALE[min(len(SCALE) - 1, i * len(SCALE) // max(len(ranked), 1))]
        styles.append({"if": {"filter_query": f"{{mean}} = {value!r}"}, "backgroundColor": shade})
    return styles


def results_table(group: dict, table_id: str) -> DataTable:
    """A sweep's cells × mean ± std of the final metric, sortable (numbers sort as numbers), coloured."""
    rows = results_rows(group)
    metric = group.get("metric", "val_loss")
    num = Format(precision=4, scheme=Scheme.decimal)
    cols: list[Any] = [
        {
            "name": f,
            "id": f,
            "type": "numeric" if isinstance(rows[0].get(f) if rows else None, int | float) else "text",
        }
        for f in group.get("varied") or []
    ] or [{"name": "cell", "id": "cell"}]
    cols += [
        {"name": f"{metric} mean", "id": "mean", "type": "numeric", "format": num},
        {"name": "± std", "id": "std", "type": "numeric", "format": num},
        {"name": "seeds", "id": "n", "type": "numeric"},
    ]
    return DataTable(
        id=table_id,
        data=rows,
        columns=cols,
        sort_action="native",
        sort_by=[{"column_id": "mean", "direction": "desc" if group.get("higher_is_better") else "asc"}],
        style_as_list_view=True,
        style_header={"fontWeight": 600, "background": "#f4f6f8"},
        style_cell={"fontFamily": "system-ui, sans-serif", "fontSize": 14, "padding": "6px 10px"},
        style_data_conditional=_shade(rows, bool(group.get("higher_is_better"))),
    )


def group_card(group: dict, ids_: dict[str, str], present: bool = False) -> list:
    """The group's card on Compare: title, verdicts, bands, and (a sweep) the results table."""
    title = group.get("title") or (
        f"Sweep over {', '.join(group['varied'])}" if group.get("varied") else "Group"
    )
    out: list = [
        html.H2(title),
        html.Div(verdicts(group), id=ids_["verdicts"]),
        dcc.Graph(
            id=ids_["bands"],
            figure=band_figure(group, present),
            className="graph",
            config=components.GRAPH_CONFIG,
        ),
    ]
    if group.get("map"):  # a map preset: its effect per axis value beside the bands
        out.append(map_figure.map_graph(group["map"]))
    if group.get("kind") != "preset":
        out.append(
            html.Div(results_table(group, ids_["table"]), id=ids_["table_box"], className="table-card")
        )
    return out
