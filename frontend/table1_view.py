"""Table 1 as the Invariance page lays it out: the paper's 18 cells beside the computed ones, read from
`normlab.table1.Table1` (the engine's result as the API serves it). Pure functions, unit-tested."""

from __future__ import annotations

from typing import Any

from normlab.table1 import PAPER_METHODS, PAPER_TABLE1, PROSE_CELL, TRANSFORMS, Method, Table1, Transform

PROSE_NOTE = (
    "§5.1's prose says \"all the normalization methods are invariant to re-scaling the "
    'dataset", but Table 1 prints "No" for weight normalization. The computed cell decides.'
)


def cell_id(method: Method, transform: Transform) -> str:
    """The `data-cell` of a computed cell: 'weight/dataset_rescaling'."""
    return f"{method}/{transform}"


def invariance_table(table: Table1 | None) -> list[dict[str, Any]]:
    """18 rows, one per (paper method, transform): the paper's answer, the computed one (None before the
    table is computed), the measured output difference, whether they agree, and the prose note on the
    one cell where the paper's prose and its table disagree."""
    rows = []
    for m in PAPER_METHODS:
        for t in TRANSFORMS:
            paper = PAPER_TABLE1[m][t]
            computed = table.methods[m][t] if table is not None else None
            rows.append(
                {
                    "method": m,
                    "transform": t,
                    "paper": paper,
                    "computed": computed,
                    "difference": table.max_abs_diff[m][t] if table is not None else None,
                    "agrees": None if computed is None else computed == paper,
                    "note": PROSE_NOTE if (m, t) == PROSE_CELL else "",
                }
            )
    return rows


def extra_rows(table: Table1 | None) -> dict[str, list[dict[str, Any]]]:
    """Methods beyond the paper's three (RMSNorm, none, registered normalizers) that the engine also
    computed, in column order."""
    if table is None:
        return {}
    return {
        m: [
            {"transform": t, "computed": table.methods[m][t], "difference": table.max_abs_diff[m][t]}
            for t in TRANSFORMS
        ]
        for m in table.extra_methods
    }
