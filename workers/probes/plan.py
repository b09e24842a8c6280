"""`plan(spec, kind, own_forward)`: which steps trace hidden states and which estimate Fisher curvature.

The plan reads no clock: a run's probe steps follow from its spec (and the model kind and device it gives),
the same on an idle or a busy host, on a replay, and in a test. Costs are counted in training steps of the
run's own model (one forward and backward pass over a batch), the unit an estimate's passes are made of:

- a hidden-state trace adds a fraction of its step (TRACE_STEPS);
- a Fisher estimate is one pass for the per-layer traces (BASE_STEPS[kind]) and one Fisher-vector
  product per Krylov vector of λ_max (VECTOR_STEPS[kind]). λ_max iterates to a tolerance
  (`workers.probes.curvature`), so its vectors vary with the spectrum; the plan counts the typical
  number measured by `normlab bench probes --accuracy`: WARM_VECTORS warm (`power_iterations` if more),
  COLD_VECTORS for the first (cold) one; λ_max(H) as many Hessian-vector products again, the empirical
  Fisher one more trace pass. The constants are fitted to the warm and cold columns of
  `normlab bench probes`, which prints this plan's figures beside the measured ones.

The run may spend HEADROOM × budget × steps on probes (the rest covers what the estimate leaves behind:
events, bookkeeping, caches it evicted). Traces get what they need, up to TRACE_SHARE of it (beyond that
they are thinned to every k × trace_every steps); Fisher estimates get the rest: as many as fit, the first
at step FIRST_FISHER, the others evenly spread over the run and `fisher_every` apart at the least.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from normlab_client.spec import ProbeSpec, RunSpec

Kind = Literal["feedforward", "conv", "recurrent"]

HEADROOM = 0.85  # of spec.probes.budget is planned; the rest is for costs the plan does not count
TRACE_SHARE = 0.3  # of the planned time at most for hidden-state traces
FIRST_FISHER = 5  # the first estimate's step: after the run's first steps (allocations, first calls)
TRACE_STEPS = 0.5  # a hidden-state trace, in training steps (what recording adds to its step)
# a Fisher estimate's trace pass (its recorded step's extra included) and one Krylov vector, per model kind:
# a recurrent net's products run step by step through time, twice differentiable, while it trains fused
BASE_STEPS: dict[Kind, float] = {"feedforward": 1.4, "conv": 1.6, "recurrent": 1.9}
VECTOR_STEPS: dict[Kind, float] = {"feedforward": 1.0, "conv": 1.0, "recurrent": 1.8}
# Krylov vectors a λ_max to tolerance typically takes (medians measured on digits, digits-mse, seq-digits:
# cold 5.5–11, warm 4.5–6.5; at most curvature.MAX_VECTORS)
COLD_VECTORS = 8
WARM_VECTORS = 5
OWN_FORWARD_STEPS = 0.4  # an estimate that cannot reuse the training forward (on a GPU) runs its own


@dataclass(frozen=True)
class ProbePlan:
    """The run's probe steps and what they are planned to cost, in training steps."""

    steps: int
    trace_every: int  # traces at step 1 and every trace_every steps
    fisher_steps: tuple[int, ...]
    cold_cost: float  # the first estimate
    warm_cost: float  # each later one
    allowance: float  # training steps the run may spend on probes (HEADROOM × budget × steps)
    fisher_room: float  # the part of it left for Fisher estimates
    budget_needed: float | None  # the smallest budget (a whole percent) that fits one estimate, if none fits

    def traces(self, step: int) -> bool:
        return step == 1 or step % self.trace_every == 0

    def cost(self, index: int) -> float:
        """The planned cost of the run's index-th estimate (0: the cold one)."""
        return self.cold_cost if index == 0 else self.warm_cost

    @property
    def trace_count(self) -> int:
        return _trace_count(self.steps, self.trace_every)

    @property
    def planned_share(self) -> float:
        """The planned probe time ÷ the run's training time."""
        fisher = sum(self.cost(i) for i in range(len(self.fisher_steps)))
        return (TRACE_STEPS * self.trace_count + fisher) / self.steps

    def public(self) -> dict:
        """The plan as the run's summary records it (the Fisher steps as first, spacing and count)."""
        f = self.fisher_steps
        return {
            "trace_every": self.trace_every,
            "fisher_first": f[0] if f else None,
            "fisher_spacing": f[1] - f[0] if len(f) > 1 else None,
            "fisher_count": len(f),
            "cold_cost_steps": self.cold_cost,
            "warm_cost_steps": self.warm_cost,
            "allowance_steps": self.allowance,
            "fisher_room_steps": self.fisher_room,
            "planned_share": self.planned_share,
            "unit": "training steps of this run's model",
        }


def estimate_costs(probes: ProbeSpec, kind: Kind, own_forward: bool = False) -> tuple[float, float]:
    """(cold, warm) cost of one Fisher estimate in training steps, from what it computes."""
    base, vector = BASE_STEPS[kind], VECTOR_STEPS[kind]
    warm_vectors = max(probes.power_iterations or 2, WARM_VECTORS)
    per_estimate = (
        base + (OWN_FORWARD_STEPS if own_forward else 0.0) + (base if probes.empirical_fisher else 0.0)
    )
    lambdas = 2 if probes.hessian else 1  # λ_max(H) iterates as λ_max(F) does
    cold = per_estimate + lambdas * vector * max(COLD_VECTORS, warm_vectors)
    warm = per_estimate + lambdas * vector * warm_vectors
    return cold, warm


def plan(spec: RunSpec, kind: Kind, own_forward: bool = False) -> ProbePlan:
    """The probe steps of a run of `spec` on a model of this kind (see the module docstring)."""
    resolved = spec.resolved()
    p, steps = resolved.probes, int(resolved.steps or 1)
    whole = HEADROOM * p.budget * steps
    trace_every = p.trace_every
    while TRACE_STEPS * _trace_count(steps, trace_every) > TRACE_SHARE * whole and trace_every < steps:
        trace_every += p.trace_every  # thinned to a multiple of trace_every until the traces fit
    # the estimates get the rest, and at least 1 − TRACE_SHARE of it: step 1 traces whatever the budget
    fisher_room = whole - min(TRACE_STEPS * _trace_count(steps, trace_every), TRACE_SHARE * whole)
    cold, warm = estimate_costs(p, kind, own_forward)
    count, needed = 0, None
    if steps >= FIRST_FISHER:
        if fisher_room + 1e-9 < cold:
            # the estimates' part is at least (1 − TRACE_SHARE) × HEADROOM × budget × steps: enough at
            needed = math.ceil(100 * cold / ((1 - TRACE_SHARE) * HEADROOM * steps) - 1e-9) / 100
        else:
            by_budget = 1 + int((fisher_room - cold) / warm + 1e-9)
            by_cadence = 1 + (steps - FIRST_FISHER) // p.fisher_every
            count = min(by_budget, by_cadence)
    spacing = max(p.fisher_every, (steps - FIRST_FISHER) // (count - 1)) if count > 1 else 0
    return ProbePlan(
        steps=steps,
        trace_every=trace_every,
        fisher_steps=tuple(FIRST_FISHER + i * spacing for i in range(count)),
        cold_cost=cold,
        warm_cost=warm,
        allowance=whole,
        fisher_room=fisher_room,
        budget_needed=needed,
    )


def _trace_count(steps: int, every: int) -> int:
    """Traced steps: step 1 and every `every`-th."""
    return 1 + steps // every - (1 if every == 1 else 0)
