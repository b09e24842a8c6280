"""Probes: hidden-state traces over time steps (§3.1) and true-Fisher curvature (§5.2), live.

`make_prober(spec, model, task_data, optimizer)` gives the training loop a `Prober` (or None when
spec.probes is off); see contracts.md, "Probes hook".
"""

from workers.probes.prober import Prober, make_prober

__all__ = ["Prober", "make_prober"]
