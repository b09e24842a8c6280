"""η·λ_max(H) of a run's series: estimates flagged as lower bounds (short of their tolerance) are not read
as values, neither at the first estimate ("at initialisation") nor in the late mean."""

from __future__ import annotations

import pytest

from normlab.arms import series_stats


def _series(etas, flags):
    return {
        "fisher_series": [
            {"step": 10 * (i + 1), "eta_hessian_lambda_max": e, "hessian_lower_bound": f, "weight_sets": []}
            for i, (e, f) in enumerate(zip(etas, flags, strict=True))
        ]
    }


def test_lower_bounds_are_left_out_of_the_first_and_the_late_figures():
    out = series_stats(_series([0.5, 1.5, 2.2, 1.0], [True, False, False, True]))
    assert out["eta_lambda_first"] is None  # the first estimate stopped short: no figure at initialisation
    assert out["eta_lambda_late"] == pytest.approx(2.2)  # of the second half, the one within tolerance
    within = series_stats(_series([0.5, 1.5, 2.2, 1.0], [False] * 4))
    assert within["eta_lambda_first"] == 0.5 and within["eta_lambda_late"] == pytest.approx(1.6)


def test_series_stored_before_the_flag_read_as_before():
    old = {"fisher_series": [{"step": s, "eta_hessian_lambda_max": v} for s, v in ((5, 0.4), (50, 1.9))]}
    out = series_stats(old)
    assert out["eta_lambda_first"] == 0.4 and out["eta_lambda_late"] == pytest.approx(1.9)
