"""`Prober`: the training loop's hook — when to trace, when to estimate curvature, and what it costs.

The loop calls, each step (contracts.md, "Probes hook"):
    model.capture = prober.capture_this_step(step)
    with prober.recording(x) or nullcontext(): forward        (the estimate's recorders, on its steps)
    loss.backward(retain_graph=prober.keeps_graph)
    prober.after_backward(step, x, y, outputs, loss)  -> [("hidden", payload)]   (curvature measured here,
    optimizer.step()                                                             at the pre-update weights)
    prober.after_update(step)                          -> [("fisher", payload)]  (with the update's angle)
    with prober.outside(): evaluate                    (evaluation steps: not the step's time)

Cost control. Hidden traces: a token bucket — training time earns trace time at the rate
(1 − FISHER_SHARE) × TARGET × budget (`spec.probes.budget`); a due trace waits while traces are over their
share. A trace step's cost is the time its capture adds to the step over the median plain step.
Fisher estimates are planned over the whole run, whose length is known: the run's allowance is TARGET × budget
× (steps × the median plain step) less the hidden traces' projected part (at most 1 − FISHER_SHARE of it;
their measured cost × the traces due when less), paced along a line that starts with credit for one estimate,
so the first one comes as soon as a few plain steps are timed (FIRST_FISHER) and the rest spread over the run
(`fisher_every` apart at the least). Once the first is done, the line starts from what it cost plus credit for
one more: the cold first estimate's premium (1.4× a warm one) no longer holds back every later one
(seq-digits' second came at step 75–89 instead of 55, and its fifth late in the run or not at all). The line
never passes the allowance. The predicted cost is the lower median of the last few measured (a cold one ÷
COLD), each with all it was charged: its recorded step's extra, its passes, the groups' update and its
after-effect (below; a payload's cost_steps is its passes and update alone); before any, PRIOR_COST_STEPS ×
COLD plain steps: one estimate slowed by a busy host does not push the next ones out of the run. When even one
estimate does not fit the allowance, the run logs a warning at once with the budget that would fit.
Every estimate states its cost in plain training steps.

After-effects. An estimate sweeps the whole parameter vector several times and the batch's activations
through its passes; the training step's working set is out of the caches afterwards, and the next plain
steps run slower (copy on a 2-core Xeon: +11 %, +5 %, +2 %, +1 % of a step; on a 2-core EPYC with a
512 KiB L2 a run's overhead read 3-4 points above what the timers charged). The AFTER_STEPS plain steps
after an estimate are charged their signed excess over the median plain step (clamped to ± one step, so a
lone hiccup of the host is not): the budget sees that cost, what those steps were not charged counts as
training time (a median step's, unless clamped), and they are left out of the median itself.

Clock: on a CPU model, the process's CPU time (`time.process_time`), which other processes on a shared
host disturb far less than wall time, and which both sides of every ratio (probe ÷ plain step) share;
on an accelerator, wall time (the host's CPU time does not see the device's work).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections import deque

from torch import nn

from normlab.spec import ProbeSpec
from workers.probes.curvature import CurvatureProbe
from workers.probes.groups import add_update, snapshot
from workers.probes.hidden import hidden_payload
from workers.probes.likelihood import Likelihood

FISHER_SHARE = 0.7  # of the budget at least for Fisher estimates; hidden traces (their capture steps)
# get the rest, or what they are projected to need when that is less (`Prober._allowance`)
TARGET = 0.85  # of spec.probes.budget: the headroom covers costs no timer sees (events, bookkeeping)
FIRST_FISHER = 5  # the first estimate comes after a few timed plain steps (so its cost can be stated)
PRIOR_COST_STEPS = 4.5  # a warm estimate in plain steps: 3.2-5.5 measured (`normlab bench probes`)
COSTS_KEPT = 5  # the predicted cost is the lower median of this many latest estimates
MEDIAN_EVERY = 8  # new step times before the median plain step is sorted again
RECHECK_STEPS = 10  # at most this many steps between two looks at a plan that said "not yet"
COLD = 1.5  # the first estimate costs more (a cold λ_max iterates to tolerance; graphs built once)
AFTER_STEPS = 4  # plain steps after an estimate charged to it their excess over the median (docstring)


class Prober:
    """Hidden-state traces and true-Fisher curvature for one run, within a time budget."""

    def __init__(self, spec, model: nn.Module, task_data, optimizer):
        p = spec.probes
        self.spec, self.model, self.optimizer = spec, model, optimizer
        self.trace_every, self.fisher_every, self.budget = p.trace_every, p.fisher_every, p.budget
        likelihood = Likelihood(task_data.info.target)
        device = next(model.parameters()).device
        self.clock = time.process_time if device.type == "cpu" else time.perf_counter  # see the docstring
        self.curvature = CurvatureProbe(
            model,
            likelihood,
            task_data.loss,
            power_iterations=p.power_iterations or spec.resolved().probes.power_iterations,
            hessian=p.hessian,
            empirical=p.empirical_fisher,
            seed=spec.seed,
            clock=self.clock,
        )
        self.next_fisher = FIRST_FISHER
        self.total_steps = int(spec.steps if spec.steps is not None else spec.resolved().steps)
        self.last: dict[str, dict | None] = {"hidden": None, "fisher": None}
        self.step_times: deque[float] = deque(maxlen=25)  # steps without probe work
        self.any_times: deque[float] = deque(maxlen=25)  # every step (when all steps trace)
        self.train_seconds = 0.0  # plain training time seen so far
        self.spent = {"hidden": 0.0, "fisher": 0.0}  # seconds the probes took, per kind
        self._step_start: float | None = None
        self._step_probe = 0.0
        self._step_outside = 0.0  # seconds of this step spent outside training and probing (`outside`)
        self._first_trace: float | None = None  # step 1's excess over a plain step, until its trace is priced
        self._step_flags = (False, False)
        self._pending: tuple | None = None
        # seconds of recent estimates, as if warm: all each was charged (its recorded step's extra, its
        # passes, the groups' update and the after-effect on the plain steps after it: `_finish_cost`)
        self.costs: deque[float] = deque(maxlen=COSTS_KEPT)
        self.last_fisher_step = 0
        self.no_fit: dict | None = None  # why no estimate fits, once known (logged once)
        self._log: list[tuple[str, dict]] = []  # log events to hand out with the next step's events
        self._unpriced: float | None = None  # a traced step seen before any plain step (step 1)
        self.traces_done = 0  # hidden traces whose cost is fully charged
        self._timed = 0  # step times appended so far (any_times; step_times only with it)
        self._median_key: tuple | None = None  # what step_seconds() last sorted, and its answer
        self._median = 0.0
        self._cost_median: float | None = None  # median of `costs`, once per estimate
        self._recorded = None  # this step's recorded training forward, for its estimate
        self._recheck_at = 0.0  # training seconds before which the plan need not be asked again
        self._step_recorded = False  # whether this step's forward was recorded (its extra is the estimate's)
        self._after = 0  # plain steps left whose excess over the median is the last estimate's
        self.first_spent: float | None = None  # what the first estimate cost in all (the plan's start)
        self._open: tuple[float, bool] | None = None  # (spent["fisher"] as the estimate began, cold)
        self.after_seconds = 0.0  # what those steps were charged in all (signed; part of spent["fisher"])

    # -- timing ---------------------------------------------------------------------------------
    def _close_step(self, now: float) -> None:
        if self._step_start is None:
            return
        plain = max(now - self._step_start - self._step_probe - self._step_outside, 0.0)
        hidden, fisher = self._step_flags
        if hidden and not fisher:  # recording (and the unfused recurrent path) slows the step itself
            base = self.step_seconds()
            if base is None and self._unpriced is None:
                self._unpriced = plain  # priced once a plain step is timed (it must not earn budget)
                return
            extra = max(plain - base, 0.0) if base is not None else 0.0
            self.spent["hidden"] += extra
            self.traces_done += 1
            plain -= extra
            if self._first_trace is not None:  # step 1's trace: priced as this one, at most what it took
                first = min(extra, self._first_trace)
                self.spent["hidden"] += first
                self.traces_done += 1
                self.train_seconds -= first
                self._first_trace = None
        elif fisher and self._step_recorded:  # the estimate's recorders slowed the step's own passes
            base = self.step_seconds()
            extra = max(plain - base, 0.0) if base is not None else 0.0
            self.spent["fisher"] += extra
            plain -= extra
        after = False
        if self._after and not (hidden or fisher):  # the estimate's own step opened the window, uncharged
            self._after -= 1
            base = self.step_seconds()
            if base is not None:
                excess = min(max(plain - base, -base), base)
                self.spent["fisher"] += excess
                self.after_seconds += excess
                plain -= excess
                after = True
            if not self._after:
                self._finish_cost()
        self.train_seconds += plain
        self._timed += 1
        self.any_times.append(plain)
        if not (hidden or fisher or after):
            self.step_times.append(plain)
        self._settle()

    def _finish_cost(self) -> None:
        """The open estimate is charged in full (its after-effect window ended, or the next estimate
        begins): what it cost, as if warm, joins the costs the plan predicts from; the first one's is the
        start of the plan's line."""
        if self._open is None:
            return
        mark, cold = self._open
        self._open = None
        cost = self.spent["fisher"] - mark
        self.costs.append(cost / COLD if cold else cost)
        self._cost_median = None
        if cold and self.first_spent is None:
            self.first_spent = cost

    def _settle(self, final: bool = False) -> None:
        """Time the held traced step 1 once a plain step is timed. What it took beyond a plain step is
        mostly the run's start-up (first calls, first allocations: 1.4-2.7 steps on seq-digits and digits),
        which a run pays with or without probes; its trace is charged as the next trace costs (at most
        that excess), or the whole excess if the run ends before another trace."""
        if final and self._first_trace is not None:
            self.spent["hidden"] += self._first_trace
            self.traces_done += 1
            self.train_seconds -= self._first_trace
            self._first_trace = None
        if self._unpriced is None or not (self.step_times or final or len(self.any_times) > 1):
            return
        base = self.step_seconds() if self.step_times else None
        extra = max(self._unpriced - base, 0.0) if base is not None else 0.0
        if final:
            self.spent["hidden"] += extra
            self.traces_done += 1
        else:
            self._first_trace = extra
            extra = 0.0
        self.train_seconds += self._unpriced - extra
        self._timed += 1
        self.any_times.append(self._unpriced - extra)
        self._unpriced = None

    @contextlib.contextmanager
    def outside(self):
        """Around work the loop does inside a step that is neither training nor probing (an evaluation):
        its time is left out of the step's, so a trace or an estimate on an evaluation step is not
        charged for the evaluation (half of seq-digits' traces were, 1.6-2.5 steps each)."""
        t0 = self.clock()
        try:
            yield
        finally:
            self._step_outside += self.clock() - t0

    @property
    def probe_seconds(self) -> float:
        return self.spent["hidden"] + self.spent["fisher"]

    def step_seconds(self) -> float | None:
        """Median seconds of a plain training step (None before the first one is timed). Sorted again only
        once MEDIAN_EVERY new step times have come in (at first, every time): the plan asks for it on most
        steps, and the median of the last 25 steps hardly moves in a few."""
        times = self.step_times or self.any_times
        if not times:
            return None
        key = (times is self.step_times, self._timed)
        last = self._median_key
        if last is None or key[0] != last[0] or key[1] - last[1] >= (1 if len(times) < 25 else MEDIAN_EVERY):
            self._median_key, self._median = key, float(sorted(times)[len(times) // 2])
        return self._median

    def _within_budget(self) -> bool:
        earned = TARGET * self.budget * max(self.train_seconds, 1e-9)
        return self.spent["hidden"] <= (1 - FISHER_SHARE) * earned

    def _predicted_cost(self, step_s: float) -> float:
        """Seconds the next Fisher estimate should cost in all: the lower median of the latest ones (as if
        warm), or the prior. The lower one: of two costs the median is their mean, and one estimate that a
        busy host slowed 2.5× (seq-digits' second, under a CI run's load) priced every later one at 1.8×
        a warm one and left the run 3 estimates where 5 fit. What an estimate costs beyond its prediction
        is still charged, and the plan's line holds the run to its allowance."""
        if self.costs:
            if self._cost_median is None:  # once per estimate, not at every step the plan is asked
                self._cost_median = float(statistics.median_low(self.costs))
            return self._cost_median
        return COLD * PRIOR_COST_STEPS * step_s

    def _allowance(self, step_s: float) -> tuple[float, float]:
        """(seconds the whole run may spend on Fisher estimates, its projected plain training seconds).

        The Fisher estimates get the run's whole TARGET × budget less what the hidden traces are projected
        to take: at most their share (1 − FISHER_SHARE), less when their measured cost × the traces due
        says so (a feed-forward trace costs a fraction of a step)."""
        total = max(self.total_steps * step_s, self.train_seconds)
        whole = TARGET * self.budget * total
        hidden = (1 - FISHER_SHARE) * whole
        if self.traces_done:
            due = self.total_steps // self.trace_every + 1
            hidden = min(hidden, 1.2 * due * self.spent["hidden"] / self.traces_done)
        return whole - hidden, total

    def _affordable(self, step: int) -> bool:
        """Whether the next Fisher estimate fits the run's plan (see the module docstring)."""
        step_s = self.step_seconds()
        if step_s is None:
            return False
        predicted = self._predicted_cost(step_s)
        allowance, total = self._allowance(step_s)
        # Not yet: the plan is not asked again until the training time it needs has passed (at most
        # RECHECK_STEPS steps ahead, as step times drift), not at every step: a few µs of each idle step
        soon = self.train_seconds + RECHECK_STEPS * step_s
        if allowance < predicted:
            if self.last["fisher"] is None and self.no_fit is None:
                self._note_no_fit(step, predicted, allowance, total, step_s)
            self._recheck_at = soon
            return False
        spent = self.spent["fisher"]
        if spent + predicted > allowance:  # the plan's end: only a longer projected run makes room
            self._recheck_at = soon
            return False
        # the line's start: credit for one estimate, and once the first is done, what it cost besides
        credit = predicted + (self.first_spent or 0.0)
        paced = credit + (allowance - credit) * min(self.train_seconds / total, 1.0)
        if spent + predicted <= paced:
            return True
        # spent + predicted ≤ credit + (allowance − credit) · train / total from this training time on
        # (allowance > credit here: else paced ≥ allowance ≥ spent + predicted above)
        self._recheck_at = min((spent + predicted - credit) * total / (allowance - credit), soon)
        return False

    def _note_no_fit(self, step, predicted, allowance, total, step_s) -> None:
        """Log (once) that no estimate fits, with the budget that would fit one."""
        needed = predicted / (FISHER_SHARE * TARGET * total)
        percent = math.ceil(needed * 100 * 1.05)  # a little headroom: step times vary
        self.no_fit = {
            "level": "warning",
            "probe": "fisher_budget",
            "message": (
                f"No Fisher estimate fitted the budget — raise it to {percent} % (probe "
                f"budget {self.budget:.0%} now; probes.budget {percent / 100:g}, "
                f"--probe-budget {percent / 100:g}). One estimate is predicted to cost "
                f"≈ {predicted / step_s:.1f} training steps (measured step time) and "
                f"this run's {self.total_steps} steps leave room for "
                f"{allowance / step_s:.1f}."
            ),
            "budget": self.budget,
            "budget_needed": percent / 100,
            "estimate_cost_steps": predicted / step_s,
            "room_steps": allowance / step_s,
            "step": step,
        }
        largest = max_budget()
        if percent / 100 > largest:
            self.no_fit["message"] += (
                f" That is above the largest budget ({largest:.0%}): train "
                "longer to see curvature for this model."
            )
        self._log.append(("log", dict(self.no_fit)))

    # -- the hook ---------------------------------------------------------------------------------
    def capture_this_step(self, step: int) -> bool | str:
        """Whether the model should record hidden states in this step's forward pass: "fast" (record on
        the model's own training path, see workers.engine.models) or False."""
        now = self.clock()
        self._close_step(now)
        self._step_start, self._step_probe, self._step_recorded = now, 0.0, False
        self._step_outside = 0.0
        hidden = (step % self.trace_every == 0 or step == 1) and (step == 1 or self._within_budget())
        fisher = (
            step >= self.next_fisher and self.train_seconds >= self._recheck_at and self._affordable(step)
        )
        self._step_flags = (hidden, fisher)
        if fisher:
            self._finish_cost()
            self._open = (self.spent["fisher"], self.last_fisher_step == 0)
            self._after = AFTER_STEPS  # the plain steps after this one (`_close_step`)
        return "fast" if hidden else False

    def recording(self, x):
        """For the loop to enter around this step's forward pass: a recorder when this step estimates the
        Fisher and the estimate can use the training forward (then the loss's backward must keep the graph:
        `keeps_graph`), else None. Its set-up time is the estimate's."""
        self._recorded = None
        if not self._step_flags[1]:
            return None
        t0 = self.clock()
        self._recorded = self.curvature.recording(x)
        self._step_recorded = self._recorded is not None
        spent = self.clock() - t0
        self._step_probe += spent
        self.spent["fisher"] += spent
        return self._recorded

    @property
    def keeps_graph(self) -> bool:
        """Whether this step's backward must keep the graph for the estimate (see `recording`)."""
        return self._recorded is not None

    def after_backward(self, step: int, x, y, outputs, loss) -> list[tuple[str, dict]]:
        hidden, fisher = self._step_flags
        if not (hidden or fisher or self._log):  # most steps: nothing to do, no clock read
            return []
        t0 = self.clock()
        events: list[tuple[str, dict]] = self._log
        self._log = []
        if hidden:
            payload = finite(hidden_payload(self.model))
            if payload is not None:
                events.append(("hidden", payload))
                self.last["hidden"] = payload
            self.spent["hidden"] += self.clock() - t0
        t1 = self.clock()
        if fisher:
            lr = float(self.optimizer.param_groups[0]["lr"])
            capture = getattr(self.model, "capture", False)
            recorded, self._recorded = self._recorded, None
            payload, seconds = self.curvature.estimate(x, y, lr, recorded, outputs if recorded else None)
            self.model.capture = capture
            self._pending = (payload, seconds, snapshot(self.curvature.groups, self.curvature.named))
            self.spent["fisher"] += self.clock() - t1
        self._step_probe += self.clock() - t0
        return events

    def after_update(self, step: int) -> list[tuple[str, dict]]:
        if self._pending is None:
            return []
        t0 = self.clock()
        payload, seconds, before = self._pending
        self._pending = None
        params = self.curvature.named
        for entry, group in zip(payload["groups"], self.curvature.groups, strict=True):
            add_update(entry, group, before[group.param], params[group.param], self.spec.optimizer)
        seconds["groups_update"] = self.clock() - t0
        step_s = self.step_seconds()
        total = sum(seconds.values())
        payload["costs"] = {k: (v / step_s if step_s else None) for k, v in seconds.items()}
        payload["cost_steps"] = total / step_s if step_s else None
        payload["cost_seconds"] = total
        payload["steps_since_last"] = step - self.last_fisher_step if self.last_fisher_step else None
        payload["cold"] = self.last_fisher_step == 0
        payload["optimizer"] = self.spec.optimizer  # effective_lr = η/‖w‖² is SGD's step; see effective_step
        payload = finite(payload)
        self.last_fisher_step = step
        self.next_fisher = step + self.fisher_every
        self.last["fisher"] = payload
        spent = self.clock() - t0
        self._step_probe += spent
        self.spent["fisher"] += spent
        return [("fisher", payload)]

    def fisher_note(self) -> str | None:
        """Why the run has no Fisher estimate (None when it has one)."""
        if self.last["fisher"] is not None:
            return None
        if self.no_fit is not None:
            return self.no_fit["message"]
        step_s = self.step_seconds()
        if step_s is None or self.train_seconds <= 0:
            return "No Fisher estimate: the run ended before a training step was timed."
        return (
            f"No Fisher estimate: the run ended ({self.total_steps} steps) before the first one was "
            f"due (step {self.next_fisher}); set probes.fisher_every lower or train longer."
        )

    def summary(self) -> dict:
        """{"hidden": last hidden payload, "fisher": last fisher payload, "overhead": measured share,
        "fisher_note": why there is no Fisher estimate, or None}.

        "overhead" is the probes' time ÷ plain training time, with its parts per kind; "after_effect" is
        the part of the Fisher share that the plain steps after estimates were charged (see the module
        docstring)."""
        self._settle(final=True)
        train = self.train_seconds
        overhead = self.probe_seconds / train if train > 0 else None
        parts = {k: v / train for k, v in self.spent.items()} if train > 0 else None
        return {
            **self.last,
            "overhead": overhead,
            "overhead_parts": parts,
            "after_effect": self.after_seconds / train if train > 0 else None,
            "fisher_note": self.fisher_note(),
            "fisher_note_logged": self.no_fit is not None and self.last["fisher"] is None,
        }


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
