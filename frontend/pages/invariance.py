"""Invariance: Table 1 as the paper prints it beside the table normlab computes, cell by cell, with the
measured output differences, and the one cell where the paper's prose and its table disagree."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, callback, dcc, html
from dash.development.base_component import Component
from pydantic import ValidationError

from frontend import components, data, ids
from frontend.api_client import ApiError
from frontend.table1_view import PROSE_NOTE, cell_id, extra_rows, invariance_table
from normlab.table1 import (
    METHOD_NAMES,
    PAPER_METHODS,
    PROSE_CELL,
    TRANSFORM_NAMES,
    TRANSFORMS,
    Table1,
)


def _word(v: bool | None) -> str:
    return "—" if v is None else "Invariant" if v else "No"


def _diff(v: float | None) -> str:
    return "" if v is None else f"|Δ| {v:.1e}"


def _table(
    rows: list[dict[str, Any]], computed: bool, extras: dict[str, list[dict[str, Any]]] | None = None
) -> html.Table:
    head = html.Thead(html.Tr([html.Th("")] + [html.Th(TRANSFORM_NAMES[t]) for t in TRANSFORMS]))
    body = []
    for m in PAPER_METHODS:
        cells: list[html.Th | html.Td] = [html.Th(METHOD_NAMES[m], scope="row")]
        for r in (r for r in rows if r["method"] == m):
            if not computed:
                cells.append(
                    html.Td(_word(r["paper"]), className="paper-cell " + ("yes" if r["paper"] else "no"))
                )
                continue
            klass = "computed-cell " + (
                "pending" if r["computed"] is None else "agree" if r["agrees"] else "disagree"
            )
            data_attrs: dict[str, Any] = {"data-cell": cell_id(m, r["transform"])}
            cells.append(
                html.Td(
                    className=klass,
                    title=r["note"] or None,
                    **data_attrs,
                    children=[
                        html.Div(_word(r["computed"]), className="verdict"),
                        html.Div(_diff(r["difference"]), className="diff"),
                        html.Div("≠ paper's table" if r["agrees"] is False else "", className="flag"),
                    ],
                )
            )
        body.append(html.Tr(cells))
    for name, extra in (extras or {}).items():
        label = METHOD_NAMES.get(name, f"{name} (registered)")  # type: ignore[call-overload]
        body.append(
            html.Tr(
                [html.Th([label, html.Div("beyond the paper", className="diff")], scope="row")]
                + [
                    html.Td(
                        className="extra-cell",
                        children=[
                            html.Div(_word(r["computed"]), className="verdict"),
                            html.Div(_diff(r["difference"]), className="diff"),
                        ],
                    )
                    for r in extra
                ]
            )
        )
    return html.Table(className="inv-table", children=[head, html.Tbody(body)])


def render(table: Table1 | None) -> list[Component]:
    """Both tables and the notes, from the engine's Table 1 (None: not computed yet)."""
    rows = invariance_table(table)
    n_done = sum(r["computed"] is not None for r in rows)
    disagreements = [r for r in rows if r["agrees"] is False]
    # The engine explains the prose/table cell itself when it computed the table; say it once.
    engine_notes = table.notes if table is not None else []
    prose = engine_notes[0] if engine_notes else PROSE_NOTE + " " + _verdict(rows)
    notes = [html.Li([html.B("Prose vs table. "), prose])]
    notes += [html.Li([html.B("From the computation. "), n]) for n in engine_notes[1:]]
    for r in disagreements:
        if (r["method"], r["transform"]) != PROSE_CELL:
            where = f"{METHOD_NAMES[r['method']]}, {TRANSFORM_NAMES[r['transform']]}"
            notes.append(
                html.Li(
                    f"{where}: "
                    f"the paper says {_word(r['paper'])}, normlab measures "
                    f"{_word(r['computed'])} ({_diff(r['difference'])}). {r['note']}"
                )
            )
    tolerance = f" (|Δ| ≤ {table.tolerance:g})" if table is not None else ""
    return [
        html.Div(
            className="inv-pair",
            children=[
                html.Div([html.H3("Table 1 as printed in the paper"), _table(rows, computed=False)]),
                html.Div(
                    [
                        html.H3(f"Computed by normlab ({n_done} of 18 cells)"),
                        _table(rows, computed=True, extras=extra_rows(table)),
                    ]
                ),
            ],
        ),
        html.P(
            "Each computed cell transforms the weights or the data, runs the normalized layer before and "
            "after, and reports the largest change in its output (float64). Invariant means the change "
            f"is at rounding level{tolerance}.",
            className="muted",
        ),
        html.H3("Notes"),
        html.Ul(notes, className="notes"),
    ]


def _verdict(rows: list[dict[str, Any]]) -> str:
    cell = next(r for r in rows if (r["method"], r["transform"]) == PROSE_CELL)
    if cell["computed"] is None:
        return "normlab has not computed this cell yet."
    return (
        f"normlab measures {_word(cell['computed'])} ({_diff(cell['difference'])}): the "
        f"{'table' if cell['computed'] == cell['paper'] else 'prose'} is right."
    )


def fetch() -> tuple[Table1 | None, str]:
    """(Table 1 from the API, "") or (None, why not)."""
    try:
        # The first request computes the table (a subprocess of the engine): allow it minutes.
        return Table1.model_validate(data.api().invariance(timeout=600)), ""
    except ApiError as exc:
        return None, exc.detail
    except ValidationError as exc:
        return None, f"the API's answer is not Table 1 ({exc.error_count()} problems)"


def layout(**_: str) -> html.Div:
    # Rendered at once with empty computed cells; the callback fetches (the first fetch may compute).
    return html.Div(
        className="inv-page",
        children=[
            components.card(
                "Invariance under re-scaling and re-centering (§5.1, Table 1)",
                children=[
                    html.Div(
                        "Computing Table 1 (the first time takes a little while)…",
                        id="inv-message",
                        className="message",
                        role="status",
                    ),
                    html.Div(render(None), id=ids.INV_TABLE),
                ],
            ),
            # Disabled until a fetch fails: retries never overlap a fetch still under way.
            dcc.Interval(id="inv-poll", interval=10_000, max_intervals=30, disabled=True),
            *components.page_stores(),
        ],
    )


@callback(
    Output(ids.INV_TABLE, "children"),
    Output("inv-message", "children"),
    Output("inv-poll", "disabled"),
    Input("inv-poll", "n_intervals"),
)
def on_poll(_n: int | None) -> tuple[object, str, bool]:
    table, error = fetch()
    if table is None:
        return dash.no_update, f"Not available yet: {error} (retrying every 10 s)", False
    return render(table), "", True


dash.register_page(  # type: ignore[no-untyped-call]  # dash's register_page is unannotated
    __name__, path="/invariance", name="Invariance", title="normlab · Invariance", order=4
)
