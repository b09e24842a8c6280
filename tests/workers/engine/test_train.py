"""The training loop: events, determinism, divergence, cancellation, failures, and every task training."""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from torch import nn

from normlab_client.events import TERMINAL_STATUSES, Scalars, StatusPayload
from normlab_client.spec import RunSpec
from workers.engine import train

train_module = importlib.import_module("workers.engine.train")


class TinyMLP(nn.Module):
    """A stand-in model, so the loop's own behaviour is tested apart from the models' code."""

    def __init__(self, d_in: int, n_out: int, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out))

    def forward(self, x):
        return self.net(x)


@pytest.fixture
def tiny_model(monkeypatch):
    monkeypatch.setattr(
        train_module, "build_model", lambda spec, data, options: TinyMLP(data.input_dim, data.n_outputs)
    )


def run(spec: RunSpec, settings, **kw):
    events = []
    result = train(spec, events.append, settings=settings, **kw)
    return result, events


def test_events_are_numbered_without_gaps_and_end_with_one_terminal_status(tiny_model, settings):
    result, events = run(RunSpec(task="digits", steps=12, eval_every=5, seed=1), settings, run_id="r1")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert all(e.run_id == "r1" for e in events)
    assert events[0].kind == "status" and events[0].payload == {"status": "running"} and events[0].step == 0
    assert [e.terminal for e in events] == [False] * (len(events) - 1) + [True]
    final = StatusPayload(**events[-1].payload)
    assert final.status == result.status == "completed" and final.metrics == result.metrics
    scalars = [e for e in events if e.kind == "scalars"]
    assert [e.step for e in scalars] == list(range(1, 13))  # log_every is 1 for a 12-step run
    assert all(Scalars(**e.payload) for e in scalars)
    # the loop builds the payload as a dict (checked on its first and evaluation steps only): every one
    # has Scalars' fields in their order, with plain floats (or None) as values
    assert all(list(e.payload) == list(Scalars.model_fields) for e in scalars)
    assert all(type(v) in (float, type(None)) for e in scalars for v in e.payload.values())
    assert all(e.payload == Scalars(**e.payload).model_dump() for e in scalars)
    evaluated = [e.step for e in scalars if e.payload["val_loss"] is not None]
    assert evaluated == [5, 10, 12]  # every eval_every steps, and always the last step
    assert all(0.0 <= e.payload["accuracy"] <= 1.0 for e in scalars if e.step in evaluated)
    for key in ("train_loss", "val_loss", "val_accuracy", "test_loss", "test_accuracy"):
        assert math.isfinite(result.metrics[key])
    assert result.step == 12 and result.device == "cpu" and result.kernel_backend == "torch"


def test_scalars_are_thinned_on_long_runs_but_every_eval_step_is_kept(tiny_model, settings, monkeypatch):
    assert train_module.log_every(100) == 1 and train_module.log_every(200_000) == 500
    monkeypatch.setattr(train_module, "MAX_SCALAR_EVENTS", 50)
    _, events = run(RunSpec(task="digits", steps=300, eval_every=70, batch_size=4), settings)
    steps = [e.step for e in events if e.kind == "scalars"]
    assert steps == sorted(set(range(6, 301, 6)) | {70, 140, 210, 280, 300})


@pytest.mark.parametrize(
    "spec",
    [
        RunSpec(
            task="digits",
            norm="batch",
            steps=15,
            eval_every=5,
            seed=7,
            optimizer="sgd",
            lr=0.05,
            hidden_size=16,
        ),
        RunSpec(
            task="adding",
            norm="layer",
            cell="lstm",
            seq_len=8,
            eval_seq_len=12,
            steps=10,
            eval_every=5,
            seed=7,
            hidden_size=8,
        ),
    ],
    ids=["digits-batch-sgd", "adding-layer-lstm"],
)
def test_same_spec_and_seed_give_the_same_loss_curve_on_cpu(spec, settings):

    def curve(s):
        _, events = run(s, settings)
        return [
            (e.payload["train_loss"], e.payload["val_loss"], e.payload["grad_norm"])
            for e in events
            if e.kind == "scalars"
        ]

    assert curve(spec) == curve(spec)
    assert curve(spec) != curve(spec.model_copy(update={"seed": 8}))


def test_a_nan_loss_ends_the_run_as_diverged_at_that_step(tiny_model, settings, monkeypatch):
    real_loss = train_module.load_task

    def poisoned(spec, settings):
        data = real_loss(spec, settings)
        loss, calls = data.loss, []

        def nan_on_fifth(outputs, y):
            calls.append(1)
            out = loss(outputs, y)
            return out * float("nan") if len(calls) == 5 else out

        data.loss = nan_on_fifth
        return data

    monkeypatch.setattr(train_module, "load_task", poisoned)
    result, events = run(RunSpec(task="digits", steps=20), settings)
    assert result.status == "diverged" and result.step == 5
    final = events[-1]
    assert final.kind == "status" and final.step == 5 and "step 5" in final.payload["message"]
    assert final.payload["metrics"]["train_loss"] is None  # JSON-safe: no NaN in metrics
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_a_huge_sgd_learning_rate_diverges_without_raising(settings):
    # squared error has no ceiling: at lr 10 the output weights grow geometrically until the loss is inf
    result, events = run(
        RunSpec(
            task="adding",
            cell="tanh",
            norm="none",
            optimizer="sgd",
            lr=10.0,
            seq_len=5,
            steps=200,
            hidden_size=16,
        ),
        settings,
    )
    assert result.status == "diverged" and 1 < result.step < 200
    assert events[-1].payload["status"] == "diverged"


def test_should_stop_cancels_before_the_next_step(tiny_model, settings):
    seen = []

    def stop():
        seen.append(1)
        return len(seen) > 3  # checked before every step: three steps run, the fourth does not

    result, events = run(RunSpec(task="digits", steps=50), settings, should_stop=stop)
    assert result.status == "cancelled" and result.step == 3
    assert events[-1].payload["status"] == "cancelled" and events[-1].terminal
    assert max(e.step for e in events if e.kind == "scalars") == 3


def test_an_exception_becomes_a_failed_run_with_its_message(settings, monkeypatch):
    def broken(spec, data, options):
        raise RuntimeError("model exploded on purpose")

    monkeypatch.setattr(train_module, "build_model", broken)
    result, events = run(RunSpec(task="digits", steps=5), settings)
    assert result.status == "failed" and "model exploded on purpose" in result.error
    assert events[-1].payload["status"] == "failed" and "model exploded" in events[-1].payload["message"]
    assert any(e.kind == "log" and "traceback" in e.payload for e in events)
    assert events[-1].payload["status"] in TERMINAL_STATUSES


def test_unavailable_data_fails_with_the_folder_in_the_message(tiny_model, tmp_path):
    from normlab.settings import Settings

    result, _ = run(RunSpec(task="mnist", steps=2), Settings(data_dir=tmp_path))
    assert result.status == "failed" and str(tmp_path / "mnist") in result.error


def test_engine_options_come_from_settings_reach_the_model_and_are_recorded(settings, monkeypatch):
    from workers.engine.options import EngineOptions

    seen = []
    real = train_module.build_model
    monkeypatch.setattr(train_module, "build_model", lambda *a: seen.append(a[2]) or real(*a))
    update = {"kernel_backend": "torch", "cuda_graphs": False, "native_step": False}
    result, _ = run(RunSpec(task="digits", steps=2, norm="layer"), settings.model_copy(update=update))
    assert seen == [
        EngineOptions(
            kernel_backend="torch",
            cuda_graphs=False,
            c_step=False,
            cc=settings.cc,
            cache_dir=settings.cache_dir,
        )
    ]
    assert result.engine == {"kernel_backend": "torch", "cuda_graphs": False, "c_step": False}
    assert result.kernel_backend == train_module.kernels.backend_for(torch.zeros(1), "torch") == "torch"
    # options passed in win over the settings, and reach every layer that picks a path
    chosen = EngineOptions(cuda_graphs=False)
    models = []
    monkeypatch.setattr(train_module, "build_model", lambda *a: models.append(real(*a)) or models[-1])
    result, _ = run(RunSpec(task="digits", steps=2, norm="layer"), settings, options=chosen)
    assert result.engine == chosen.record()
    layers = [m for m in models[0].modules() if hasattr(m, "engine_options")]
    assert layers and all(m.engine_options is chosen for m in layers)


def test_a_bad_kernel_backend_is_refused_with_the_choices(tiny_model, settings):
    from workers.engine.options import EngineOptions

    with pytest.raises(ValueError, match="use 'auto', 'torch' or 'triton'"):
        EngineOptions(kernel_backend="cuda")  # type: ignore[arg-type]


def test_graphs_are_freed_after_every_run(tiny_model, settings, monkeypatch):
    calls = []
    monkeypatch.setattr(train_module.graphs, "clear", lambda: calls.append("clear"))
    for on in (False, True):
        result, _ = run(RunSpec(task="digits", steps=2), settings.model_copy(update={"cuda_graphs": on}))
        assert result.status == "completed" and result.engine["cuda_graphs"] is on
    assert calls == ["clear", "clear"]


def _matrix() -> list:
    """Every task × applicable normalizer × cell (and the LSTM's eq. 29 placement), tiny sizes."""
    from normlab_client.catalog import TASKS

    cases = []
    for name, task in TASKS.items():
        for norm in task.norms:
            for cell in task.cells or (None,):
                cases.append(pytest.param(name, norm, cell, "full", id=f"{name}-{norm}-{cell or 'ff'}"))
        if "lstm" in task.cells:
            cases.append(pytest.param(name, "layer", "lstm", "cell", id=f"{name}-layer-lstm-eq29"))
    return cases


SMALL = {
    "adding": {"seq_len": 6, "eval_seq_len": 9},
    "copy": {"seq_len": 3, "eval_seq_len": 5},
    "charlm": {"seq_len": 6, "eval_seq_len": 8},
    "handwriting": {"seq_len": 6},
}


@pytest.mark.slow  # ≈ 90 runs: 15-45 s on 2 shared cores
@pytest.mark.parametrize("task,norm,cell,placement", _matrix())
def test_every_task_norm_and_cell_trains_20_steps_with_finite_loss(
    task, norm, cell, placement, settings, mnist_settings
):
    spec = RunSpec(
        task=task,
        norm=norm,
        cell=cell,
        ln_placement=placement,
        steps=20,
        hidden_size=8,
        layers=1,
        batch_size=4,
        eval_every=20,
        **SMALL.get(task, {}),
    )
    result, events = run(spec, mnist_settings if task == "mnist" else settings)
    assert result.status == "completed", result.error
    losses = [e.payload["train_loss"] for e in events if e.kind == "scalars"]
    assert len(losses) == 20 and all(math.isfinite(v) for v in losses)
    for key in ("val_loss", "test_loss"):
        assert math.isfinite(result.metrics[key])


def test_probes_report_through_the_same_numbered_stream(settings):
    spec = RunSpec(
        task="adding",
        seq_len=6,
        hidden_size=8,
        steps=12,
        eval_every=6,
        probes={"enabled": True, "trace_every": 4, "fisher_every": 6},
    )
    result, events = run(spec, settings)
    assert result.status == "completed", result.error
    hidden = [e for e in events if e.kind == "hidden"]
    assert hidden and all(len(e.payload["hidden_norms"]) == 6 for e in hidden)
    assert [e.seq for e in events] == list(range(1, len(events) + 1)) and events[-1].terminal
    assert result.probes is not None and result.probes["hidden"] == hidden[-1].payload


def test_asking_for_cuda_without_a_gpu_fails_with_a_fix(settings):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result, events = run(RunSpec(task="digits", steps=2, device="cuda"), settings)
    assert result.status == "failed" and "no CUDA GPU" in result.error and "'cpu'" in result.error


def test_evaluation_in_small_chunks_gives_the_same_metrics(settings, monkeypatch):
    from workers.engine import load_task
    from workers.engine.loop_eval import evaluate
    from workers.engine.models import build_model

    spec = RunSpec(task="copy", norm="batch", seq_len=4, eval_seq_len=7, hidden_size=8).resolved()
    data = load_task(spec, settings)
    model = build_model(spec, data.info, data.input_dim, data.n_outputs)
    model(next(data.train_batches(16, torch.Generator().manual_seed(0)))[0])  # BN running statistics
    whole = evaluate(model, data, "val", torch.device("cpu"), 8)
    loop_eval = importlib.import_module("workers.engine.loop_eval")
    monkeypatch.setattr(loop_eval, "CHUNK_FLOATS", 70_000)
    assert 1 < loop_eval.chunk_size(data, data.split("val")[0], 8) < 100  # several uneven chunks
    one_by_one = evaluate(model, data, "val", torch.device("cpu"), 8)
    assert one_by_one.keys() == whole.keys() == {"loss", "accuracy"}
    for key in whole:
        assert one_by_one[key] == pytest.approx(whole[key], rel=1e-5)


def test_recurrent_batchnorm_beyond_its_trained_length_is_explained_in_the_log(settings):
    spec = RunSpec(
        task="adding", norm="batch", seq_len=5, eval_seq_len=9, hidden_size=8, steps=4, eval_every=2
    )
    result, events = run(spec, settings)
    assert result.status == "completed" and math.isfinite(result.metrics["val_mse"])
    warnings = [e for e in events if e.kind == "log" and e.payload["level"] == "warning"]
    assert len(warnings) == 2  # announced before training, then measured once at the first evaluation
    assert warnings[0].step == 0 and "BatchNorm" in warnings[0].payload["message"]
    measured = warnings[1]
    assert measured.step == 2 and measured.payload["layers"][0]["eval_steps_beyond"] == 4
    assert measured.payload["layers"][0]["trained_steps"] == 5


def test_layernorm_runs_say_nothing_about_trained_lengths(settings):
    spec = RunSpec(task="adding", norm="layer", seq_len=5, eval_seq_len=9, hidden_size=8, steps=2)
    _, events = run(spec, settings)
    assert not [e for e in events if e.kind == "log" and e.payload["level"] != "info"]


def test_threads_follow_the_work_and_respect_an_explicit_choice(monkeypatch):
    import os

    setup = importlib.import_module("workers.engine.loop_setup")
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(setup, "_TORCH_DEFAULT_THREADS", 4)
    monkeypatch.setattr(setup, "_threads_we_set", None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    try:
        torch.set_num_threads(4)
        assert setup.choose_threads(100_000, 32) == 1 == torch.get_num_threads()  # a small model: 1
        assert setup.choose_threads(10**7, 10**4) == 3  # big work: capped by the CPUs we may use
        torch.set_num_threads(2)  # the embedding program chose: leave it alone
        assert setup.choose_threads(100_000, 32) == 2
        monkeypatch.setattr(setup, "_threads_we_set", 2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # so did the environment
        assert setup.choose_threads(10**7, 10**4) == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("on_gpu", [False, True], ids=["cpu-dots", "foreach-norms"])
def test_the_gradient_norm_is_the_float64_norm_of_all_gradients(on_gpu):
    # the CPU path (a dot per gradient) and the GPU path (foreach norms) both run on the CPU here
    g = torch.Generator().manual_seed(3)
    params = [nn.Parameter(torch.empty(s)) for s in ((64, 32), (32,), (10, 64, 3), (7,))]
    for p in params[:3]:
        p.grad = torch.randn(p.shape, generator=g) * 10.0 ** torch.randint(-3, 3, (), generator=g).item()
    params[2].grad = torch.randn(3, 64, 10, generator=g).transpose(0, 2)  # a non-contiguous gradient
    assert not params[2].grad.is_contiguous()
    want = math.sqrt(sum(float(p.grad.double().square().sum()) for p in params[:3]))
    got = train_module._grad_norm(params, on_gpu)
    assert type(got) is float and got == pytest.approx(want, rel=1e-6)
    assert train_module._grad_norm(params[3:], on_gpu) == 0.0  # no gradient at all
