"""The probe plan as a pure function of the spec: which steps trace and estimate, what they cost, no clock."""

from __future__ import annotations

import time

import pytest

from normlab_client.spec import ProbeSpec, RunSpec
from workers.probes import plan as plan_module
from workers.probes.plan import (
    BASE_STEPS,
    COLD_VECTORS,
    FIRST_FISHER,
    HEADROOM,
    TRACE_SHARE,
    TRACE_STEPS,
    VECTOR_STEPS,
    WARM_VECTORS,
    estimate_costs,
    plan,
)

KINDS = ["feedforward", "conv", "recurrent"]


def _spec(steps=300, **probes) -> RunSpec:
    return RunSpec(task="digits", steps=steps, probes=ProbeSpec(enabled=True, **probes))


def _traced(p, steps: int) -> list[int]:
    return [s for s in range(1, steps + 1) if p.traces(s)]


def test_a_worked_example_from_the_definitions():
    """200 steps of an MLP, budget 15 %, traces every 25, estimates 10 apart at the least, λ_max
    planned at WARM_VECTORS Krylov vectors warm: the run may spend 0.85 × 0.15 × 200 training steps on
    probes; 9 traces take their part; the estimates as many as fit after a cold one, spread evenly from
    step 5."""
    spec = RunSpec(
        task="digits", steps=200, probes=ProbeSpec(enabled=True, fisher_every=10, power_iterations=2)
    )
    p = plan(spec, "feedforward")
    cold = BASE_STEPS["feedforward"] + COLD_VECTORS * VECTOR_STEPS["feedforward"]
    warm = BASE_STEPS["feedforward"] + WARM_VECTORS * VECTOR_STEPS["feedforward"]
    whole = HEADROOM * 0.15 * 200
    traced = [1, 25, 50, 75, 100, 125, 150, 175, 200]
    room = whole - len(traced) * TRACE_STEPS
    count = 1 + int((room - cold) // warm)
    assert (p.cold_cost, p.warm_cost) == pytest.approx((cold, warm))
    assert _traced(p, 200) == traced
    assert p.allowance == pytest.approx(whole) and p.fisher_room == pytest.approx(room)
    assert len(p.fisher_steps) == count and count > 1
    spacing = (200 - FIRST_FISHER) // (count - 1)
    assert p.fisher_steps == tuple(FIRST_FISHER + i * spacing for i in range(count))
    assert p.budget_needed is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("steps", [5, 40, 300, 2000])
@pytest.mark.parametrize("budget", [0.05, 0.15, 0.5, 5.0])
@pytest.mark.parametrize("fisher_every", [1, 50])
def test_the_plan_stays_within_its_allowance_and_fits_as_many_estimates_as_it_can(
    kind, steps, budget, fisher_every
):
    p = plan(_spec(steps, budget=budget, fisher_every=fisher_every, trace_every=25), kind)
    f = p.fisher_steps
    traces = TRACE_STEPS * len(_traced(p, steps))
    estimates = sum(p.cost(i) for i in range(len(f)))
    assert p.allowance == pytest.approx(HEADROOM * budget * steps)
    if f:
        assert f[0] == FIRST_FISHER and f[-1] <= steps
        assert all(b - a >= fisher_every for a, b in zip(f, f[1:], strict=False))
        assert estimates + min(traces, TRACE_SHARE * p.allowance) <= p.allowance + 1e-9
    # one estimate more would pass the allowance or come closer than fisher_every
    more = estimates + p.cost(len(f)) + min(traces, TRACE_SHARE * p.allowance)
    assert more > p.allowance + 1e-9 or FIRST_FISHER + len(f) * fisher_every > steps
    assert 1 in _traced(p, steps) and p.trace_every % 25 == 0
    assert p.planned_share == pytest.approx((traces + estimates) / steps)


def test_traces_are_thinned_to_a_multiple_of_trace_every_when_they_would_pass_their_share():
    p = plan(_spec(1000, budget=0.02, trace_every=10), "feedforward")
    whole = HEADROOM * 0.02 * 1000
    assert p.trace_every > 10 and p.trace_every % 10 == 0
    assert TRACE_STEPS * len(_traced(p, 1000)) <= TRACE_SHARE * whole
    coarser = p.trace_every - 10  # the next finer cadence would not have fitted
    assert TRACE_STEPS * (1 + 1000 // coarser) > TRACE_SHARE * whole


def test_estimate_costs_count_passes_and_krylov_vectors():
    default = estimate_costs(ProbeSpec(power_iterations=2), "feedforward")
    cold, warm = default
    assert cold > warm > 0
    # λ_max iterates to its tolerance: the plan counts WARM_VECTORS, or power_iterations where it asks more
    assert estimate_costs(ProbeSpec(power_iterations=1), "feedforward") == pytest.approx(default)
    more = estimate_costs(ProbeSpec(power_iterations=WARM_VECTORS + 1), "feedforward")[1]
    assert more == pytest.approx(warm + VECTOR_STEPS["feedforward"])
    hessian = estimate_costs(ProbeSpec(power_iterations=2, hessian=True), "feedforward")
    assert hessian[1] - warm == pytest.approx(warm - BASE_STEPS["feedforward"])  # λ_max(H) as λ_max(F)
    empirical = estimate_costs(ProbeSpec(power_iterations=2, empirical_fisher=True), "feedforward")
    assert empirical[1] - warm == pytest.approx(BASE_STEPS["feedforward"])
    assert estimate_costs(ProbeSpec(power_iterations=2), "recurrent")[1] > warm
    own = estimate_costs(ProbeSpec(power_iterations=2), "feedforward", own_forward=True)
    assert own[1] > warm and own[0] - own[1] == pytest.approx(cold - warm)


# (a 5-step recurrent run fits no cold estimate, 8 Krylov vectors, even at the largest budget)
@pytest.mark.parametrize("steps", [10, 30, 120])
def test_a_run_without_room_names_a_budget_at_which_the_same_run_fits_one(steps):
    p = plan(_spec(steps, budget=0.01), "recurrent")
    assert p.fisher_steps == () and p.budget_needed is not None and p.budget_needed > 0.01
    assert round(p.budget_needed * 100) == pytest.approx(p.budget_needed * 100)  # a whole percent
    fits = plan(_spec(steps, budget=p.budget_needed), "recurrent")
    assert fits.fisher_steps and fits.fisher_steps[0] == FIRST_FISHER


def test_a_run_shorter_than_the_first_estimate_plans_none_and_asks_for_no_budget():
    p = plan(_spec(FIRST_FISHER - 1), "feedforward")
    assert p.fisher_steps == () and p.budget_needed is None and _traced(p, FIRST_FISHER - 1) == [1]


def test_the_plan_reads_no_clock_and_is_the_same_for_the_same_spec(monkeypatch):
    spec = _spec(500, budget=0.3, fisher_every=7)
    first = plan(spec, "conv")

    def no_clock():
        raise AssertionError("the plan read a clock")

    for name in ("time", "perf_counter", "process_time", "monotonic"):
        monkeypatch.setattr(time, name, no_clock)
    again = plan(RunSpec.model_validate(spec.model_dump()), "conv")
    assert again == first and again.public() == first.public()
    assert plan(_spec(500, budget=0.3, fisher_every=7, power_iterations=8), "conv") != first
    assert not hasattr(plan_module, "time")
