"""Interventions: changes to a running run's lr, weight decay, momentum or gain freezing, each taking
effect at the start of a step and reported as an `intervention` event (step, old → new).

They come from the spec (`RunSpec.interventions`: a resubmitted or forked run replays them at the same
steps) or live, from `poll()` (the worker hands over what the API was asked; a test hands its own).
A live request may also ask for a checkpoint at the next step (a fork of a running run "now"), or that
the run yield its worker to an interactive run (`yield_asked`: the loop checkpoints at its next logged
step and hands the run back to the queue).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from normlab_client.spec import Intervention, RunSpec

GAIN_LEAVES = ("gain", "g")  # a normalizer's gain: LayerNorm/RMSNorm/BatchNorm `gain`, weight norm's `g`
Poll = Callable[[], list[dict[str, Any]]]


def gains(model: nn.Module) -> list[nn.Parameter]:
    return [p for name, p in model.named_parameters() if name.rpartition(".")[2] in GAIN_LEAVES]


class Controls:
    """What changes before a step: `take` collects live requests, `apply_due` applies the step's
    interventions (a checkpoint of the state before them is saved in between)."""

    def __init__(
        self, spec: RunSpec, emit: Callable[[int, dict[str, Any]], object], poll: Poll | None = None
    ):
        self.scheduled: dict[int, list[Intervention]] = {}
        for item in spec.interventions:
            self.scheduled.setdefault(item.step, []).append(item)
        self.emit, self.poll = emit, poll
        self.pending: list[dict[str, Any]] = []
        self.yield_asked = False

    def take(self) -> bool:
        """Collect the live requests; True when one asks for a checkpoint of the state before this step
        (the caller saves it before `apply_due` changes anything)."""
        self.pending = self.poll() if self.poll is not None else []
        if any(r.get("kind") == "yield" for r in self.pending):
            self.yield_asked = True
            self.pending = [r for r in self.pending if r.get("kind") != "yield"]
        return any(r.get("kind") == "checkpoint" for r in self.pending)

    def apply_due(self, step: int, model: nn.Module, optimizer) -> None:
        """Apply the spec's interventions for `step` and the live ones `take` collected."""
        for item in self.scheduled.get(step, ()):
            self.apply(step, item.changes(), model, optimizer, "spec")
        for request in self.pending:
            if request.get("kind") == "intervention":
                self.apply(step, request["changes"], model, optimizer, "live")

    def apply(self, step: int, changes: dict[str, Any], model: nn.Module, optimizer, source: str) -> None:
        said: dict[str, dict[str, Any]] = {}
        for knob in ("lr", "weight_decay", "momentum"):
            if knob in changes:
                group = optimizer.param_groups[0]
                if knob == "momentum" and "momentum" not in group:
                    continue  # Adam has no momentum knob of this name (its betas are left alone)
                old = group[knob]
                if old == float(changes[knob]):
                    continue  # nothing changes: no marker for it
                for g in optimizer.param_groups:
                    g[knob] = float(changes[knob])
                said[knob] = {"old": old, "new": float(changes[knob])}
        if "freeze_gain" in changes:
            params = gains(model)
            old = bool(params) and all(not p.requires_grad for p in params)
            for p in params:
                p.requires_grad_(not changes["freeze_gain"])
            said["freeze_gain"] = {"old": old, "new": bool(changes["freeze_gain"])}
        if said:
            self.emit(step, {"changes": said, "source": source})
