"""What a GPU worker runs: the engine training on CUDA with the Triton kernels (marker `gpu`).

A worker with a GPU trains through `workers.engine.train` with the kernels' default backend: LayerNorm
by the Triton kernel, LN-LSTM / LN-GRU by the fused sequences and their CUDA graphs, the per-step cells
where the probes trace hidden states. The kernels' own gpu tests check each op; these check the whole
run — events, metrics, the backend it records, the same losses as the torch backend to rounding, and the
same bits when the same spec and seed run twice. `scripts/gpu_check.sh` runs them when the engine
imports on the GPU machine (its pydantic wheels travel with the call: `scripts/gpu_wheels.sh`).
"""

from __future__ import annotations

import math

import pytest
import torch

from normlab.settings import Settings
from normlab_client.spec import RunSpec
from workers.engine import train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# (task, cell): LN in an MLP (kernels.layer_norm), the LN-LSTM and LN-GRU (fused sequences).
MODELS = [("digits", None), ("seq-digits", "lstm"), ("seq-digits", "gru")]


def _train(spec: RunSpec, settings: Settings):
    events = []
    result = train(spec, events.append, settings=settings)
    assert result.status == "completed", result.error
    losses = [e.payload["train_loss"] for e in events if e.kind == "scalars"]
    return result, events, losses


@pytest.mark.parametrize(("task", "cell"), MODELS, ids=[m[1] or "mlp" for m in MODELS])
def test_a_run_on_cuda_takes_triton_and_trains_as_the_torch_backend_does(task, cell, engine_data_dir):
    spec = RunSpec(
        task=task, norm="layer", cell=cell, steps=30, eval_every=15, batch_size=16, device="cuda", seed=3
    )
    fused, _, fused_losses = _train(spec, Settings(data_dir=engine_data_dir, kernel_backend="auto"))
    ref, _, ref_losses = _train(spec, Settings(data_dir=engine_data_dir, kernel_backend="torch"))
    assert fused.device.startswith("cuda") and fused.kernel_backend == "triton"
    assert ref.kernel_backend == "torch"
    assert len(fused_losses) == len(ref_losses) == 30
    assert all(math.isfinite(v) for v in fused_losses)
    # The two backends differ by LayerNorm's rounding (fp32) only: the first step's loss to 1e-5, and
    # after 30 Adam steps every logged loss and the final losses within 1 % of each other; the accuracy
    # within 2 points (a test case whose two best classes nearly tie may flip).
    assert fused_losses[0] == pytest.approx(ref_losses[0], rel=1e-5)
    assert fused_losses == pytest.approx(ref_losses, rel=1e-2)
    for key in ("val_loss", "test_loss"):
        assert fused.metrics[key] == pytest.approx(ref.metrics[key], rel=1e-2), key
    assert fused.metrics["test_accuracy"] == pytest.approx(ref.metrics["test_accuracy"], abs=0.02)
    assert fused_losses[-1] < fused_losses[0]  # it learns


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_same_spec_and_seed_give_the_same_bits_on_cuda(cell, engine_data_dir):
    # A run is reproducible from its spec and seed: the fused kernels reduce in a fixed order (no atomics)
    # and each run captures and replays its CUDA graphs in the same sequence.
    spec = RunSpec(
        task="seq-digits",
        norm="layer",
        cell=cell,
        steps=12,
        eval_every=6,
        batch_size=16,
        device="cuda",
        seed=5,
    )
    settings = Settings(data_dir=engine_data_dir, kernel_backend="auto", cuda_graphs=True)
    first, _, a = _train(spec, settings)
    second, _, b = _train(spec, settings)
    assert first.kernel_backend == "triton"
    assert a == b and first.metrics == second.metrics


def test_probes_on_cuda_trace_hidden_states_and_estimate_the_fisher(engine_data_dir):
    # Traced steps run the per-step cell (it returns each h_t); the Fisher pass runs on the torch backend
    # (workers.probes.fisher); the steps in between take the fused sequence.
    # The probes' time budget (the largest allowed) decides which due traces and estimates run; how it
    # prices them is tested on the CPU, so here only: some of each (traces on the steps they were due).
    spec = RunSpec(
        task="seq-digits",
        norm="layer",
        cell="lstm",
        steps=60,
        eval_every=1000,
        batch_size=8,
        device="cuda",
        seed=1,
        probes={"enabled": True, "trace_every": 10, "fisher_every": 5, "budget": 5.0},
    )
    result, events, losses = _train(spec, Settings(data_dir=engine_data_dir, kernel_backend="auto"))
    assert result.kernel_backend == "triton" and all(math.isfinite(v) for v in losses)
    traces = [e.payload for e in events if e.kind == "hidden"]
    steps = [e.step for e in events if e.kind == "hidden"]
    assert steps[0] == 1 and len(steps) >= 3 and all(s % 10 == 0 for s in steps[1:]), steps
    last = traces[-1]
    T = last["time_steps"]
    assert T > 1 and len(last["hidden_norms"]) == len(last["grad_norms"]) == T
    assert all(v > 0 and math.isfinite(v) for v in last["hidden_norms"])
    fisher = [e for e in events if e.kind == "fisher"]
    assert fisher and fisher[-1].payload["lambda_max"] > 0
