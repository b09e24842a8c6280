"""normlab/table1.json, the Table 1 the API serves, is what the engine computes now: recomputed here."""

from __future__ import annotations

import pytest

from normlab.table1 import computed_table
from workers.engine.invariance import compute_table1

REGENERATE = "python -m normlab invariance --json > normlab/table1.json"


def test_the_stored_table_is_what_the_engine_computes():
    stored, fresh = computed_table(), compute_table1()
    same = stored.model_dump(exclude={"max_abs_diff"}) == fresh.model_dump(exclude={"max_abs_diff"})
    assert same, f"normlab/table1.json is stale: regenerate it with `{REGENERATE}`"
    # the measured changes to float64 rounding (another BLAS may sum in another order): an invariant cell
    # stays at rounding level, any other keeps its value
    for method, row in fresh.max_abs_diff.items():
        for transform, value in row.items():
            assert stored.max_abs_diff[method][transform] == pytest.approx(
                value, rel=1e-6, abs=fresh.tolerance
            )
