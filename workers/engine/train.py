"""`train(spec, emit, should_stop, settings=…)`: one training run, reported as events and a RunResult.

The same function runs from the CLI, a test or a Celery worker. Events go through one callback,
numbered 1, 2, 3 … by `normlab_client.events.EventCounter`:

    status {"status": "running"}                      step 0
    log    {"level", "message", …}                    data set, model size, recurrent-BN notes
    scalars (normlab_client.events.Scalars)                  every log_every steps, every eval step, last step
    hidden / fisher                                   probe payloads, when spec.probes.enabled
    status {"status": completed|cancelled|diverged|failed, "message", "metrics"}   always last

Nothing raises out of `train`: a NaN/Inf loss ends the run as `diverged` at that step, `should_stop()`
(checked before every step) as `cancelled`, and any exception as `failed` (traceback logged).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

import kernels
from kernels import graphs
from normlab import checkpoints
from normlab.settings import Settings
from normlab_client.events import Event, EventCounter, RunResult, RunStatus, StatusPayload
from normlab_client.spec import ParentRef, RunSpec
from workers.engine import checkpoint
from workers.engine.checkpoint import LoopState
from workers.engine.controls import Controls, Poll
from workers.engine.fork import start_child
from workers.engine.loop_eval import beyond_trained_length, evaluate
from workers.engine.loop_setup import (
    build_model,
    choose_threads,
    make_optimizer,
    make_prober,
    pick_device,
    seed_everything,
)
from workers.engine.options import EngineOptions
from workers.engine.tasks import load_task
from workers.engine.tasks.base import seeded

if TYPE_CHECKING:
    from workers.probes.prober import Prober

log = logging.getLogger(__name__)

MAX_SCALAR_EVENTS = 400  # scalars events per run, besides the ones on evaluation steps
REPORTED_KINDS = ("scalars", "hidden", "fisher", "intervention")  # a step's own events


class _ReplayEnded(Exception):
    """A fork's replay of its parent's steps ended before the fork step (cancelled, or it failed)."""

    def __init__(self, status: str, message: str | None):
        super().__init__(message)
        self.status, self.message = status, message


class _Unreported:
    """A resumed run's events, less the step events of the steps it already reported (it trains them
    again from its checkpoint, but their events are stored)."""

    def __init__(self, events: EventCounter, through: int):
        self.events, self.through = events, through

    def __call__(self, kind, step: int, payload: dict, check: bool = True) -> Event | None:
        if step <= self.through and kind in REPORTED_KINDS:
            return None
        return self.events(kind, step, payload, check)


def log_every(steps: int) -> int:
    """Steps between scalars events, so a run sends at most ≈ MAX_SCALAR_EVENTS of them."""
    return max(1, math.ceil(steps / MAX_SCALAR_EVENTS))


def _finite_or_none(metrics: dict[str, float | None]) -> dict[str, float | None]:
    return {k: (v if v is not None and math.isfinite(v) else None) for k, v in metrics.items()}


class _Run:
    """The state of one run between its first and last event."""

    def __init__(
        self,
        spec: RunSpec,
        events: EventCounter,
        should_stop,
        settings: Settings,
        options: EngineOptions,
        run_id: str | None = None,
        resume: checkpoint.Resume | None = None,
    ):
        self.spec, self.should_stop, self.settings = spec, should_stop, settings
        self.resume = resume
        self.events = events if resume is None else _Unreported(events, resume.reported)
        self.options = options
        self.run_id = run_id  # checkpoints are kept for runs with an id (the service's), under settings
        self.poll: Poll | None = None
        self.writer: checkpoint.Writer | None = None
        self.step = 0
        self.device = "cpu"
        self.kernel_backend = "torch"
        self.metrics: dict[str, float | None] = {}  # latest known: train_loss, val_*, test_*
        self.prober: Prober | None = None
        self.beyond_reported = False
        # a replay (a fork's parent trained again from its checkpoint up to the fork step): the state it
        # starts from, the step it stops after, and the state it reached there
        self.initial: dict | None = None
        self.until: int | None = None
        self.reached: dict | None = None

    def log(self, message: str, level: str = "info", **extra) -> None:
        self.events("log", self.step, {"level": level, "message": message, **extra})

    def execute(self) -> tuple[str, str | None]:
        spec = self.spec
        try:  # first: a replay seeds and builds its own parts, this run's set-up follows as usual
            start = self._start_state()
        except _ReplayEnded as ended:
            return ended.status, ended.message
        device = pick_device(spec.device)
        self.device = str(device)
        data = load_task(spec, self.settings)
        for note in data.notes:
            self.log(note)
        seed_everything(spec.seed)
        model = build_model(spec, data, self.options).to(device)
        probe = torch.empty(1, spec.hidden_size or 1, device=device)
        self.kernel_backend = kernels.backend_for(probe, self.options.kernel_backend)
        optimizer = make_optimizer(spec, model)
        self.prober, why_not = make_prober(spec, model, data, optimizer)
        if why_not:
            self.log(why_not, "warning")
        n_params = sum(p.numel() for p in model.parameters())
        if device.type == "cuda":
            where = torch.cuda.get_device_name(device)
        else:
            threads = choose_threads(n_params, spec.batch_size * (data.seq_len or 1))
            where = f"{threads} CPU thread{'' if threads == 1 else 's'}"
        self.log(
            f"{type(model).__name__}: {n_params} parameters on {self.device} ({where}); "
            f"LayerNorm kernel backend: {self.kernel_backend}"
            + (
                f"; CUDA graphs {'on' if self.options.cuda_graphs else 'off'}."
                if device.type == "cuda" and self.kernel_backend == "triton"
                else "."
            )
        )
        if data.info.kind == "sequence" and spec.norm == "batch":
            assert data.seq_len is not None and data.eval_seq_len is not None  # every sequence task has both
            if data.eval_seq_len > data.seq_len:
                self.log(
                    f"Recurrent BatchNorm keeps statistics for each of the {data.seq_len} trained time "
                    f"steps only; evaluation runs {data.eval_seq_len} steps, so the later steps have no "
                    "statistics of their own (§3.1). The run shows what the model does then; see the log "
                    "after the first evaluation.",
                    "warning",
                )
        batches = data.train_batches(spec.batch_size, seeded(spec.seed, 4))
        resumed = LoopState()
        if start is not None:
            resumed = start_child(spec, start, model, optimizer, batches, self.prober, self.log)
            self.step = resumed.step
            self.metrics.update(resumed.metrics)
        if self.resume is not None and self.resume.yielded:
            self.log(
                f"Resumed from its checkpoint of step {resumed.step} (it had yielded its worker to an "
                "interactive run).",
                phase="resume",
            )
        elif self.resume is not None:
            self.log(
                f"Resumed from its checkpoint of step {resumed.step} (its worker was lost): the steps up "
                f"to {self.resume.reported} are trained again and not reported twice.",
                "warning",
            )
        if self.run_id is not None:
            root, cap = self.settings.checkpoint_root, self.settings.checkpoint_bytes_per_run
            self.writer = checkpoint.Writer(root, self.run_id, cap)
        try:
            return self._loop(model, data, optimizer, device, batches, resumed)
        finally:
            if self.writer is not None:
                self.writer.close()  # the last checkpoint is on disk before the run is reported ended
                self._tell_checkpoint_failures()

    def _tell_checkpoint_failures(self) -> None:
        """Say in the log which checkpoints the disk refused (the run trained on without them); the
        API refuses forks and resumes that would need them with the same reason (`checkpoint_failed`)."""
        assert self.writer is not None
        for step, why in self.writer.new_failures():
            self.log(
                f"The checkpoint of step {step} could not be written ({why}); the run trains on without "
                "it, but it cannot be forked from that step or resumed from it. Free space under the "
                "checkpoint folder (NORMLAB_CHECKPOINT_DIR).",
                "warning",
                checkpoint_failed={"step": step, "reason": why},
            )

    def _start_state(self) -> dict | None:
        """The state this run starts from: a replay's given one, a resumed run's own checkpoint, a
        fork's parent state at its fork step (replayed from an earlier checkpoint if need be), or None
        for a fresh run."""
        if self.initial is not None:
            return self.initial
        root = self.settings.checkpoint_root
        if self.resume is not None and self.run_id is not None:
            return checkpoint.load(root, self.run_id, self.resume.step)
        parent = self.spec.parent
        if parent is None:
            return None
        loaded = parent.step if parent.checkpoint is None else parent.checkpoint
        state = checkpoint.load(root, parent.id, loaded)
        return state if loaded == parent.step else self._replay(state, parent, loaded)

    def _replay(self, state: dict, parent: ParentRef, loaded: int) -> dict:
        """The parent's state after step parent.step: its checkpoint of step `loaded` trained on with the
        parent's spec (and its interventions in between), nothing reported. Deterministic: on the CPU
        it is the state the parent had there, bit for bit."""
        self.events(
            "log",
            loaded,
            {
                "level": "info",
                "message": f"Replaying the parent's steps {loaded + 1} → {parent.step} from its checkpoint "
                f"of step {loaded}: the fork is at step {parent.step}, so the parent's training up to it "
                "runs again first (its curve up to there is the parent's).",
                "phase": "replay",
            },
        )
        spec = RunSpec.model_validate_json(state["spec"]).model_copy(update={"interventions": parent.replay})
        sub = _Run(spec, EventCounter(lambda event: None), self.should_stop, self.settings, self.options)
        sub.initial, sub.until = state, parent.step
        status, message = sub.execute()
        if sub.reached is None:
            if status == RunStatus.CANCELLED:
                raise _ReplayEnded(status, f"Cancelled while replaying the parent's steps to {parent.step}.")
            raise _ReplayEnded(
                RunStatus.FAILED, f"Replaying the parent's steps to {parent.step} ended {status}: {message}"
            )
        self.events(
            "log",
            parent.step,
            {
                "level": "info",
                "message": f"Replayed to step {parent.step}; the fork's own steps start at "
                f"{parent.step + 1}.",
                "phase": "replay",
            },
        )
        return sub.reached

    def _state(self, model, optimizer, batches, loop: LoopState) -> dict:
        loop.metrics = dict(self.metrics)
        return checkpoint.capture(self.spec, model, optimizer, batches, self.prober, loop)

    def _checkpoint(self, model, optimizer, batches, loop: LoopState) -> None:
        """Save the state after step loop.step (a run without an id keeps none)."""
        if self.writer is not None:
            self._tell_checkpoint_failures()
            self.writer.submit(self._state(model, optimizer, batches, loop))

    def _loop(self, model, data, optimizer, device, batches, resumed: LoopState) -> tuple[str, str | None]:
        spec, prober = self.spec, self.prober
        assert spec.steps is not None  # the spec is resolved (run_training)
        every = log_every(spec.steps)
        start = time.perf_counter() - resumed.elapsed
        window_loss, window_steps, window_time = (
            resumed.window_loss,
            resumed.window_steps,
            resumed.window_time,
        )
        controls = Controls(spec, lambda step, payload: self.events("intervention", step, payload), self.poll)
        writer = self.writer
        due = set(checkpoints.schedule(spec.steps, spec.checkpoint_every, resumed.step))
        if self.resume is not None:
            due.discard(resumed.step)  # a resumed run starts from that checkpoint: it exists
        params = list(model.parameters())  # once: walking the module tree every step is a visible cost
        on_gpu, checked = device.type != "cpu", False
        logged = resumed.step  # the last step whose scalars were reported (a yield waits for one)
        model.train()
        for step in range(resumed.step + 1, spec.steps + 1):
            if step - 1 == self.until:  # a replay ends where a checkpoint of its last step would be taken
                loop = LoopState(
                    step - 1, window_loss, window_steps, window_time, time.perf_counter() - start
                )
                self.reached = checkpoint.copied(self._state(model, optimizer, batches, loop))
                return RunStatus.COMPLETED, f"Replayed to step {step - 1}."
            asked = controls.take()  # (live interventions too: applied below)
            if controls.yield_asked and writer is not None and step - 1 == logged and not controls.pending:
                # at a reported step, so the run continues from exactly here with nothing trained twice
                loop = LoopState(
                    step - 1, window_loss, window_steps, window_time, time.perf_counter() - start
                )
                self._checkpoint(model, optimizer, batches, loop)
                return RunStatus.QUEUED, (
                    f"Yielded its worker to an interactive run after step {step - 1}; it continues from "
                    "its checkpoint there on the next free worker."
                )
            if writer is not None and (asked or step - 1 in due):
                # after the previous step's evaluation, before this step's interventions: the state a fork
                # from step - 1 continues
                loop = LoopState(
                    step - 1, window_loss, window_steps, window_time, time.perf_counter() - start
                )
                self._checkpoint(model, optimizer, batches, loop)
            controls.apply_due(step, model, optimizer)
            if self.should_stop is not None and self.should_stop():
                return RunStatus.CANCELLED, f"Cancelled before step {step}."
            t0 = time.perf_counter()
            self.step = step
            x, y = next(batches)
            if on_gpu:  # (on the CPU the batches are where they belong: no two dispatches a step)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            capture = prober.capture_this_step(step) if prober is not None else False
            if capture:  # (set only when recording: a module attribute costs µs each time it is set)
                model.capture = capture
            # a step that estimates the Fisher records its own forward for the estimate (no second one)
            with (prober.recording(x) if prober is not None else None) or contextlib.nullcontext():
                outputs = model(x)
            loss = data.loss(outputs, y)
            loss_value = loss.item()
            if not math.isfinite(loss_value):
                self.metrics["train_loss"] = None
                return RunStatus.DIVERGED, (
                    f"The training loss became {loss_value} at step {step}: training "
                    f"diverged. Lower the learning rate (now {spec.lr:g}) or try another "
                    "normalizer."
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward(retain_graph=prober is not None and prober.keeps_graph)
            on_eval = step % spec.eval_every == 0 or step == spec.steps
            on_log = on_eval or step % every == 0
            grad_norm = _grad_norm(params, on_gpu) if on_log else 0.0
            if step == 1:
                self._log_init_gradients(model)
            if prober is not None:
                for kind, payload in prober.after_backward(step, x, y, outputs, loss):
                    self.events(kind, step, payload)
            optimizer.step()
            if prober is not None:
                for kind, payload in prober.after_update(step):
                    self.events(kind, step, payload)
                if capture:
                    model.capture = False
            window_loss += loss_value
            window_steps += 1
            window_time += time.perf_counter() - t0
            if not on_log:
                continue
            train_loss = window_loss / window_steps
            self.metrics["train_loss"] = train_loss
            # Scalars' fields in their order, as a dict: `self.events` validates it against Scalars once
            # (building a Scalars and dumping it would validate it twice more, every step)
            scalars = {
                "train_loss": train_loss,
                "val_loss": None,
                "accuracy": None,
                "bpc": None,
                "recall": None,
                "grad_norm": grad_norm,
                "lr": optimizer.param_groups[0]["lr"],
                "steps_per_s": window_steps / max(window_time, 1e-9),
                "elapsed": time.perf_counter() - start,
            }
            if on_eval:  # not the step's time: a probe on this step is not charged for it
                with prober.outside() if prober is not None else contextlib.nullcontext():
                    self._evaluate(model, data, device, "val", scalars)
            # the contract is checked on the first event and on evaluation steps (where the validation
            # metrics join); the other steps' payloads come out of this same code with new floats
            self.events("scalars", step, scalars, check=on_eval or not checked)
            checked, logged = True, step
            window_loss, window_steps, window_time = 0.0, 0, 0.0
        last = LoopState(spec.steps, elapsed=time.perf_counter() - start)
        if self.until == spec.steps:
            self.reached = checkpoint.copied(self._state(model, optimizer, batches, last))
            return RunStatus.COMPLETED, f"Replayed to step {spec.steps}."
        self._checkpoint(model, optimizer, batches, last)
        self._evaluate(model, data, device, "test", None)
        return RunStatus.COMPLETED, f"Completed {spec.steps} steps."

    def _log_init_gradients(self, model) -> None:
        """A model that reports per-layer gradient norms (the Transformer) has them logged at
        initialisation: the first step's gradients, before any update."""
        layer_norms = getattr(model, "layer_grad_norms", None)
        if not callable(layer_norms):
            return
        norms = layer_norms()
        self.log(
            "Gradient norms at initialisation, per block from the input (‖∂ℓ/∂W‖ over its weight "
            "matrices): " + ", ".join(f"{v:.3g}" for v in norms) + ".",
            layer_grad_norms=norms,
        )

    def _evaluate(self, model, data, device, split: str, scalars: dict | None) -> None:
        m = evaluate(model, data, split, device, (self.spec.hidden_size or 0) * (self.spec.layers or 1))
        self.metrics[f"{split}_loss"] = m["loss"]
        for name in ("accuracy", "bpc", "mse", "recall"):
            if name in m:
                self.metrics[f"{split}_{name}"] = m[name]
        if scalars is not None:
            scalars["val_loss"] = m["loss"]
            for name in ("accuracy", "bpc", "recall"):
                scalars[name] = m.get(name)
        reports = beyond_trained_length(model)
        if reports and not self.beyond_reported:
            self.beyond_reported = True
            r = reports[0]
            self.log(
                f"Evaluation at {data.eval_seq_len} steps ran {r['eval_steps_beyond']} steps past "
                f"the {r['trained_steps']} time steps recurrent BatchNorm has statistics for; for those "
                f"it used the policy: {r['policy']}.",
                "warning",
                layers=reports,
            )


def _grad_norm(params: list[torch.Tensor], on_gpu: bool = False) -> float:
    """‖∇‖₂ over all parameters' gradients. On a GPU one fused norm per tensor group (torch's foreach
    kernels) and one sync; on the CPU a dot product per gradient, summed in double, which is cheaper there
    than the foreach norms stacked and normed."""
    if on_gpu:
        grads = [p.grad for p in params if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))) if grads else 0.0
    total = 0.0
    for p in params:
        g = p.grad
        if g is not None:
            g = g.reshape(-1)
            total += float(torch.dot(g, g))
    return math.sqrt(total)


def train(
    spec: RunSpec,
    emit: Callable[[Event], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    *,
    settings: Settings,
    run_id: str | None = None,
    options: EngineOptions | None = None,
    poll: Poll | None = None,
    resume: checkpoint.Resume | None = None,
) -> RunResult:
    """Train one run to its end and return the outcome; every event goes to `emit` as it happens.

    `spec` is resolved here (task defaults filled in); `should_stop` is called before every step and
    should be cheap, and so is `poll` (live interventions, checkpoint requests: workers.engine.controls).
    With a `run_id` the run keeps checkpoints under settings.checkpoint_root; with `spec.parent` it
    starts from its parent's checkpoint (workers.engine.fork); with `resume` (and its `run_id`) the run
    continues from its own checkpoint, numbering its events after its stored ones. `settings` come from
    the caller's edge (CLI, worker start, test); `options` (the engine's path choices; default: built
    from `settings`) go to the model's layers and into the result.
    """
    events = EventCounter(emit or (lambda event: None), run_id, resume.seq if resume is not None else 0)
    wall_start = time.perf_counter()
    spec = spec.resolved()
    options = options or EngineOptions.from_settings(settings)
    kernels.check_backend(options.kernel_backend)
    run = _Run(spec, events, should_stop, settings, options, run_id, resume)
    run.poll = poll
    events("status", resume.step if resume is not None else 0, {"status": RunStatus.RUNNING})
    error = None
    try:
        status, message = run.execute()
        if status == "diverged":  # the run's `error` says what diverged and at which step, like its event
            error = message
    except Exception as exc:  # noqa: BLE001 - a failed run is an outcome, reported and returned
        log.exception("run %s failed at step %d", run_id, run.step)
        status, error = RunStatus.FAILED, f"{type(exc).__name__}: {exc}"
        message = f"Failed at step {run.step}: {error}"
        run.log(message, "error", traceback=traceback.format_exc(limit=20))
    graphs.clear()  # the worker's next run has shapes of its own: free this run's captured graphs now
    metrics = _finite_or_none(run.metrics)
    probes = None
    if run.prober is not None:
        try:
            probes = run.prober.summary()
            if (
                probes.get("fisher_note")
                and status == RunStatus.COMPLETED
                and not probes.get("fisher_note_logged")
            ):
                run.log(probes["fisher_note"], "warning")
        except Exception:  # noqa: BLE001 - a probe summary never turns a finished run into a failure
            log.exception("probe summary failed")
    if status == RunStatus.QUEUED:  # yielded: back to the queue, its status event is the worker's to write
        run.log(message or "", phase="yield")
    else:
        events(
            "status", run.step, StatusPayload(status=status, message=message, metrics=metrics).model_dump()
        )
    return RunResult(
        status=status,
        step=run.step,
        metrics=metrics,
        wall_time=time.perf_counter() - wall_start,
        device=run.device,
        kernel_backend=run.kernel_backend,
        error=error,
        probes=probes,
        engine=options.record(),
    )
