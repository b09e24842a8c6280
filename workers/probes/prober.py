"""`Prober`: the training loop's hook — hidden-state traces and Fisher estimates on the steps its plan names.

The loop calls, each step (contracts.md, "Probes hook"):
    model.capture = prober.capture_this_step(step)
    with prober.recording(x) or nullcontext(): forward        (the estimate's recorders, on its steps)
    loss.backward(retain_graph=prober.keeps_graph)
    prober.after_backward(step, x, y, outputs, loss)  -> [("hidden", payload)]   (curvature measured here,
    optimizer.step()                                                             at the pre-update weights)
    prober.after_update(step)                          -> [("fisher", payload)]  (with the update's angle)
    with prober.outside(): evaluate                    (evaluation steps: not the step's time)

Which steps trace and which estimate is planned before the first step from the spec alone
(`workers.probes.plan`): no clock decides, so a run's probe steps are the same on an idle host and a busy
one. The probes draw their random numbers (sampled labels, start vectors, signs) from their own generator
seeded from the spec's seed, never from the training RNG: the same spec and seed give the same probe
events, steps and values. The clock only reports: the summary's `overhead` is the time of the probes' own
calls ÷ the rest of the loop's steps (on a CPU the process's CPU time, which other processes disturb less
than wall time; on an accelerator wall time, as the host's CPU time does not see the device's work).
"""

from __future__ import annotations

import contextlib
import math
import time

import torch
from torch import nn

from normlab_client.events import EventKind
from normlab_client.spec import ProbeSpec
from workers.engine.recurrent import GRULayer, LSTMLayer, TanhRNNLayer
from workers.probes.curvature import CurvatureProbe
from workers.probes.fisher import RecordedForward
from workers.probes.hidden import hidden_payload
from workers.probes.likelihood import Likelihood
from workers.probes.plan import FIRST_FISHER, Kind, plan
from workers.probes.weight_sets import add_update, snapshot


class Prober:
    """Hidden-state traces and true-Fisher curvature for one run, on the steps planned from its spec."""

    def __init__(self, spec, model: nn.Module, task_data, optimizer):
        p = spec.probes
        self.spec, self.model, self.optimizer = spec, model, optimizer
        self.plan = plan(spec, model_kind(model), own_forward=not RecordedForward.applies(model))
        self._fisher_steps = frozenset(self.plan.fisher_steps)
        device = next(model.parameters()).device
        self.clock = time.process_time if device.type == "cpu" else time.perf_counter  # see the docstring
        self.curvature = CurvatureProbe(
            model,
            Likelihood(task_data.info.target),
            task_data.loss,
            power_iterations=p.power_iterations or spec.resolved().probes.power_iterations,
            hessian=p.hessian,
            empirical=p.empirical_fisher,
            seed=spec.seed,
            clock=self.clock,
        )
        self.last: dict[str, dict | None] = {"hidden": None, "fisher": None}
        self.series: list[dict] = []  # per estimate, the few numbers the presets' claims read (series())
        self.estimates = 0  # Fisher estimates done so far
        self.last_fisher_step = 0
        self.no_fit = self._no_fit_warning() if self.plan.budget_needed is not None else None
        self._log: list[tuple[EventKind, dict]] = [("log", dict(self.no_fit))] if self.no_fit else []
        self._flags = (False, False)  # (trace, estimate) this step
        self._recorded: RecordedForward | None = None  # this step's recorded forward, for its estimate
        self._pending: tuple | None = None  # the estimate's payload until the update's angle joins it
        # reporting only: seconds of the probes' calls per kind, and of the loop's steps besides evaluations
        self.spent = {"hidden": 0.0, "fisher": 0.0}
        self.loop_seconds = 0.0
        self._step_start: float | None = None
        self._outside = 0.0

    # -- what a checkpoint carries -----------------------------------------------------------------
    @property
    def generator(self) -> torch.Generator:
        """The probes' own random generator (seeded from the spec's seed; the training RNG is not used)."""
        return self.curvature.generator

    def rng_state(self) -> dict:
        """What the probes carry from one estimate to the next, to save with a checkpoint: their
        generator, the warm starts and smoothing of the curvature estimates, and what the run's summary
        keeps of the estimates so far (a continued run reports as if it had never stopped)."""
        c = self.curvature
        return {
            "generator": self.generator.get_state(),
            "estimates": self.estimates,
            "last_fisher_step": self.last_fisher_step,
            "eig": c.eig,
            "heig": c.heig,
            "ema": dict(c.ema),
            "iterations": dict(c.iterations),
            "residuals": dict(c.residuals),
            "failed": dict(c.failed),
            "series": list(self.series),
            "last": dict(self.last),
        }

    def load_rng_state(self, state: dict | torch.Tensor) -> None:
        """Continue where `rng_state()` left off (an older engine's checkpoint holds the generator only)."""
        if isinstance(state, torch.Tensor):
            self.generator.set_state(state)
            return
        c = self.curvature
        self.generator.set_state(state["generator"])
        self.estimates, self.last_fisher_step = state["estimates"], state["last_fisher_step"]
        c.eig, c.heig = state["eig"], state["heig"]
        c.ema, c.iterations = dict(state["ema"]), dict(state["iterations"])
        c.residuals, c.failed = dict(state["residuals"]), dict(state["failed"])
        self.series, self.last = list(state["series"]), dict(state["last"])

    # -- the hook ---------------------------------------------------------------------------------
    def capture_this_step(self, step: int) -> bool | str:
        """Whether the model should record hidden states in this step's forward pass: "fast" (record on
        the model's own training path, see workers.engine.models) or False."""
        now = self.clock()
        if self._step_start is not None:
            self.loop_seconds += now - self._step_start - self._outside
        self._step_start, self._outside = now, 0.0
        self._flags = (self.plan.traces(step), step in self._fisher_steps)
        return "fast" if self._flags[0] else False

    @contextlib.contextmanager
    def outside(self):
        """Around work the loop does inside a step that is neither training nor probing (an evaluation):
        left out of the loop's time the overhead is measured against."""
        t0 = self.clock()
        try:
            yield
        finally:
            self._outside += self.clock() - t0

    def recording(self, x):
        """For the loop to enter around this step's forward pass: a recorder when this step estimates the
        Fisher and the estimate can use the training forward (then the loss's backward must keep the graph:
        `keeps_graph`), else None."""
        self._recorded = None
        if self._flags[1]:
            t0 = self.clock()
            self._recorded = self.curvature.recording(x)
            self.spent["fisher"] += self.clock() - t0
        return self._recorded

    @property
    def keeps_graph(self) -> bool:
        """Whether this step's backward must keep the graph for the estimate (see `recording`)."""
        return self._recorded is not None

    def after_backward(self, step: int, x, y, outputs, loss) -> list[tuple[EventKind, dict]]:
        hidden, fisher = self._flags
        if not (hidden or fisher or self._log):  # most steps: nothing to do, no clock read
            return []
        events, self._log = self._log, []
        if hidden:
            t0 = self.clock()
            payload = finite(hidden_payload(self.model))
            if payload is not None:
                events.append(("hidden", payload))
                self.last["hidden"] = payload
            self.spent["hidden"] += self.clock() - t0
        if fisher:
            t0 = self.clock()
            lr = float(self.optimizer.param_groups[0]["lr"])
            capture = getattr(self.model, "capture", False)
            recorded, self._recorded = self._recorded, None
            payload, _ = self.curvature.estimate(x, y, lr, recorded, outputs if recorded else None)
            # nn.Module types its attributes Tensor | Module; the engine's models carry a bool flag
            self.model.capture = capture  # type: ignore[assignment]
            self._pending = (payload, snapshot(self.curvature.weight_sets, self.curvature.named))
            self.spent["fisher"] += self.clock() - t0
        return events

    def after_update(self, step: int) -> list[tuple[EventKind, dict]]:
        if self._pending is None:
            return []
        t0 = self.clock()
        payload, before = self._pending
        self._pending = None
        params = self.curvature.named
        for entry, weight_set in zip(payload["weight_sets"], self.curvature.weight_sets, strict=True):
            add_update(
                entry, weight_set, before[weight_set.param], params[weight_set.param], self.spec.optimizer
            )
        payload["cost_steps"] = self.plan.cost(self.estimates)  # as planned: no clock in an event
        payload["steps_since_last"] = step - self.last_fisher_step if self.last_fisher_step else None
        payload["cold"] = self.estimates == 0
        payload["optimizer"] = self.spec.optimizer  # effective_lr = η/‖w‖² is SGD's step; see effective_step
        payload = finite(payload)
        self.estimates += 1
        self.last_fisher_step = step
        self.last["fisher"] = payload
        self.series.append(series_entry(step, payload))
        self.spent["fisher"] += self.clock() - t0
        return [("fisher", payload)]

    # -- what the run is told ---------------------------------------------------------------------
    def _no_fit_warning(self) -> dict:
        """The warning a run whose plan fits no estimate logs at its first step, with a budget that fits."""
        plan, budget = self.plan, self.spec.probes.budget
        needed = plan.budget_needed or 0.0
        percent = round(needed * 100)
        message = (
            f"No Fisher estimate fitted the budget — raise it to {percent} % (probe budget {budget:.0%} "
            f"now; probes.budget {needed:g}, --probe-budget {needed:g}). One estimate is planned at "
            f"≈ {plan.cold_cost:.1f} training steps and this run's {plan.steps} steps leave room for "
            f"{plan.fisher_room:.1f}."
        )
        largest = max_budget()
        if needed > largest:
            message += f" That is above the largest budget ({largest:.0%}): train longer to see curvature."
        return {
            "level": "warning",
            "probe": "fisher_budget",
            "message": message,
            "budget": budget,
            "budget_needed": needed,
            "estimate_cost_steps": plan.cold_cost,
            "room_steps": plan.fisher_room,
            "step": 1,
        }

    def fisher_note(self) -> str | None:
        """Why the run has no Fisher estimate (None when it has one)."""
        if self.last["fisher"] is not None:
            return None
        if self.no_fit is not None:
            return self.no_fit["message"]
        return (
            f"No Fisher estimate: the run ended ({self.plan.steps} steps) before the first one was "
            f"due (step {FIRST_FISHER}); train longer."
        )

    def summary(self) -> dict:
        """{"hidden": last hidden payload, "fisher": last fisher payload, "fisher_series": a few numbers
        of every estimate (`series_entry`), "plan": the probe plan, "overhead": measured share,
        "fisher_note": why there is no Fisher estimate, or None}.

        "overhead" is the probes' calls' time ÷ the rest of the loop's steps, with its parts per kind
        (what recording adds inside the step's own passes is not in it: `normlab bench probes` measures
        whole runs)."""
        probe = sum(self.spent.values())
        train = self.loop_seconds - probe
        return {
            **self.last,
            "fisher_series": list(self.series),
            "plan": self.plan.public(),
            "overhead": probe / train if train > 0 else None,
            "overhead_parts": {k: v / train for k, v in self.spent.items()} if train > 0 else None,
            "fisher_note": self.fisher_note(),
            "fisher_note_logged": self.no_fit is not None and self.last["fisher"] is None,
        }


def series_entry(step: int, payload: dict) -> dict:
    """One estimate's step, η·λ_max of the Hessian (None unless asked for; whether it stopped short of its
    tolerance, a lower bound) and, per scale-invariant set,
    η/‖w‖² and the angular update of the step: what a run's summary keeps of every estimate."""
    return {
        "step": step,
        "eta_hessian_lambda_max": payload.get("eta_hessian_lambda_max"),
        "hessian_lower_bound": bool(payload.get("hessian_lambda_max_lower_bound")),
        "weight_sets": [
            {
                "name": g["name"],
                "effective_lr": g.get("effective_lr"),
                "angular_update": g.get("angular_update"),
            }
            for g in payload.get("weight_sets") or []
            if g.get("scale_invariant")
        ],
    }


def model_kind(model: nn.Module) -> Kind:
    """What an estimate's passes cost on this model, relative to its training step (`workers.probes.plan`)."""
    if any(isinstance(m, LSTMLayer | GRULayer | TanhRNNLayer | nn.RNNBase) for m in model.modules()):
        return "recurrent"
    if any(isinstance(m, nn.Conv2d) or "Conv2d" in type(m).__name__ for m in model.modules()):
        return "conv"
    return "feedforward"


def max_budget() -> float:
    """ProbeSpec.budget's upper bound (the spec owns the range)."""
    return float(next(m.le for m in ProbeSpec.model_fields["budget"].metadata if getattr(m, "le", None)))


def finite(value):
    """The payload with NaN/Inf floats as None, so every event stays valid JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def make_prober(spec, model: nn.Module, task_data, optimizer) -> Prober | None:
    """A Prober for the run, or None when spec.probes is off."""
    if not spec.probes.enabled:
        return None
    if not any(p.requires_grad for p in model.parameters()):
        return None
    if task_data.info.target not in Likelihood.TARGETS:  # the run trains without probes (it says so)
        return None
    return Prober(spec, model, task_data, optimizer)
