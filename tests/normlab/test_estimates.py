"""A preset's duration on this server from the measured run times of its earlier launches
(normlab.estimates): medians per arm, the sum on one worker, the last whole launch, and no estimate
without a measured run."""

from __future__ import annotations

import pytest

from normlab.estimates import Launch, TimedRun, estimate


def _run(label: str, start: float, seconds: float, status: str = "completed") -> TimedRun:
    return TimedRun(label, status, start, start + seconds)


def test_nothing_measured_gives_no_estimate():
    assert estimate(["LN", "BN"], 5, []) is None
    queued = Launch(0.0, [TimedRun("LN", "queued", None, None), _run("BN", 0.0, 9.0, status="failed")])
    assert estimate(["LN", "BN"], 5, [queued]) is None


def test_per_arm_medians_summed_over_the_launch_and_the_last_whole_launch_timed_first_start_to_last_end():
    first = Launch(100.0, [_run("LN", 0.0, 10.0), _run("LN", 0.0, 30.0), _run("BN", 5.0, 20.0)])
    # the later launch is not whole (a run still queued): its completed run counts, its span does not
    later = Launch(200.0, [_run("LN", 50.0, 20.0), TimedRun("BN", "queued", None, None)])
    est = estimate(["LN", "BN"], 5, [first, later])
    assert est is not None
    assert est.measured == 4
    assert est.run_s == pytest.approx(20.0)  # median of 10, 30, 20, 20
    assert est.one_worker_s == pytest.approx(5 * (20.0 + 20.0))  # LN median 20, BN median 20
    assert est.last_launch_s == pytest.approx(30.0)  # the first launch: first start 0 → last end 30


def test_an_arm_never_timed_counts_at_the_median_of_every_timed_run():
    launch = Launch(0.0, [_run("LN", 0.0, 8.0), _run("LN", 0.0, 12.0)])
    est = estimate(["LN", "GN"], 2, [launch])
    assert est is not None and est.one_worker_s == pytest.approx(2 * (10.0 + 10.0))
