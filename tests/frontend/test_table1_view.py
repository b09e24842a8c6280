"""Table 1 on the Invariance page, read from the one Table 1 model (normlab.table1): the paper's cells
beside the computed ones, disagreements flagged, extra methods as extra rows."""

from __future__ import annotations

from frontend.table1_view import extra_rows, invariance_table
from normlab.table1 import PROSE_CELL, TRANSFORMS


def test_invariance_table_reads_the_computed_cells_and_flags_disagreements(make_table1):
    # a computed table that differs from the paper in exactly one cell (weight norm, dataset re-scaling)
    rows = invariance_table(make_table1(flip=PROSE_CELL))
    assert len(rows) == 18 and all(r["computed"] is not None for r in rows)
    bad = [r for r in rows if r["agrees"] is False]
    assert [(r["method"], r["transform"]) for r in bad] == [PROSE_CELL]
    assert "prose" in bad[0]["note"] and bad[0]["difference"] == 1e-16
    assert invariance_table(None)[0]["computed"] is None


def test_invariance_table_reads_the_engines_result(make_table1):
    table = make_table1()
    rows = invariance_table(table)
    assert len(rows) == 18 and all(r["agrees"] for r in rows)
    wd = next(r for r in rows if (r["method"], r["transform"]) == PROSE_CELL)
    assert wd["computed"] is False and wd["difference"] == 3.0
    extra = extra_rows(table)
    assert list(extra) == ["rms"] and [r["transform"] for r in extra["rms"]] == list(TRANSFORMS)
    assert extra_rows(make_table1(extra=False)) == {} and extra_rows(None) == {}
