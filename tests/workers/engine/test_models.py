"""build_model: every task kind × normalizer × cell builds, runs forward and backward, captures."""

from __future__ import annotations

import pytest
import torch

from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.models import MLP, ConvNet, RecurrentNet, build_model
from workers.engine.norms import LayerNorm, NormLinear


def _combos():
    seen = set()
    for name, info in TASKS.items():
        for norm in info.norms:
            for cell in info.cells or (None,):
                placements = ("full", "cell") if (cell == "lstm" and norm == "layer") else ("full",)
                for placement in placements:
                    key = (info.kind, norm, cell, placement)
                    if key not in seen:  # one task per kind is enough: the model depends on the kind
                        seen.add(key)
                        yield pytest.param(name, norm, cell, placement, id="-".join(map(str, key)))


def _input(kind: str, batch: int = 4, steps: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if kind == "flat":
        return torch.randn(batch, 10, generator=g)
    if kind == "image":
        return torch.randn(batch, 1, 8, 8, generator=g)
    return torch.randn(batch, steps, 3, generator=g)


def _spec(task, norm, cell=None, placement="full", **kw) -> RunSpec:
    fields = dict(task=task, norm=norm, batch_size=4, hidden_size=6, layers=2, ln_placement=placement)
    fields.update(kw)
    if cell:
        fields["cell"] = cell
    return RunSpec(**fields).resolved()


@pytest.mark.parametrize("task,norm,cell,placement", list(_combos()))
def test_every_kind_norm_cell_builds_and_trains_a_step(task, norm, cell, placement):
    torch.manual_seed(0)
    info = TASKS[task]
    x = _input(info.kind)
    model = build_model(_spec(task, norm, cell, placement), info, x.shape[-1], 3)
    out = model(x)
    expected = (4, 5, 3) if info.kind == "sequence" else (4, 3)
    assert out.shape == expected and torch.isfinite(out).all()
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    if info.kind == "sequence":  # evaluation on longer sequences than training (eval_seq_len)
        model.eval()
        with torch.no_grad():
            assert model(_input(info.kind, steps=9)).shape == (4, 9, 3)


@pytest.mark.parametrize("cell", ["lstm", "gru", "tanh"])
def test_recurrent_capture_fills_shapes_and_h_grad(cell):
    torch.manual_seed(0)
    info = TASKS["adding"]
    model = build_model(_spec("adding", "layer", cell), info, 3, 1)
    model.capture = True
    x = _input("sequence")
    out = model(x)
    out[:, -1].sum().backward()
    cap = model.captured
    assert len(cap["h"]) == 5 and cap["h"][0].shape == (4, 6)
    assert all(h.grad is not None for h in cap["h"])
    # ∂L/∂h_0 comes only through the recurrence (the loss reads the last step): non-zero all the same
    assert cap["h"][0].grad.abs().sum() > 0
    assert cap["summed_mean"].shape == (5,) and cap["summed_std"].shape == (5,)
    assert not cap["summed_std"].requires_grad and (cap["summed_std"] > 0).all()
    assert ("c" in cap) == (cell == "lstm")
    if cell == "lstm":
        assert len(cap["c"]) == 5 and cap["c"][0].shape == (4, 6)


def test_recurrent_capture_summed_stats_match_definition():
    torch.manual_seed(0)
    model = build_model(_spec("adding", "layer", "tanh", layers=1), TASKS["adding"], 3, 1).double()
    model.capture = True
    x = _input("sequence").double()
    model(x)
    layer = model.rnn[0]
    w = layer.proj.weight
    h = torch.zeros(4, 6, dtype=torch.float64)
    a = x[:, 0] @ w[:, :3].T + h @ w[:, 3:].T
    assert torch.allclose(model.captured["summed_mean"][0], a.mean(1).mean())
    assert torch.allclose(model.captured["summed_std"][0], a.std(1, unbiased=False).mean())


def test_capture_off_means_nothing_recorded_and_fast_path_agrees():
    torch.manual_seed(0)
    model = build_model(_spec("adding", "layer", "lstm"), TASKS["adding"], 3, 1).double()
    x = _input("sequence").double()
    fast = model(x)
    assert model.captured == {}
    model.capture = True  # the step-by-step path the probes use
    slow = model(x)
    assert torch.allclose(fast, slow, atol=1e-12)


@pytest.mark.parametrize(
    ("norm", "placement", "dtype", "tol"),
    [
        ("layer", "full", torch.float64, 1e-6),  # lstm_sequence's torch path (payloads are float32)
        ("layer", "full", torch.float32, 2e-5),  # its C path (where a C compiler is found)
        ("layer", "cell", torch.float32, 2e-5),
        ("none", "full", torch.float32, 2e-5),
    ],
)
def test_fast_capture_on_the_one_node_lstm_gives_the_step_by_step_payload(norm, placement, dtype, tol):
    # the training loop's traced steps record on the LSTM's one-node path ("fast"); the probes' payload
    # must be the one the step-by-step path (capture=True, ∂L/∂h_t by retain_grad) gives
    from workers.probes.hidden import hidden_payload

    torch.manual_seed(0)
    model = build_model(_spec("adding", norm, "lstm", placement, hidden_size=16), TASKS["adding"], 3, 2)
    model = model.to(dtype)
    x = _input("sequence", batch=5, steps=7).to(dtype)
    y = torch.randn(5, 7, 2, dtype=dtype, generator=torch.Generator().manual_seed(1))
    payloads, outs = [], []
    for capture in (True, "fast"):
        model.zero_grad(set_to_none=True)
        model.capture = capture
        out = model(x)
        ((out - y) ** 2).mean().backward()  # every step's output in the loss: ∂L/∂h_t from both sides
        payloads.append(hidden_payload(model))
        outs.append([out.detach()] + [p.grad.clone() for p in model.parameters()])
    steps, fast = payloads
    assert "h_norms" in model.captured and "h" not in model.captured  # the one-node path recorded
    assert fast.keys() == steps.keys() and fast["time_steps"] == steps["time_steps"] == 7
    for key in ("hidden_norms", "cell_norms", "summed_mean", "summed_std", "grad_norms"):
        assert len(fast[key]) == 7 and all(isinstance(v, float) for v in fast[key])
        torch.testing.assert_close(torch.tensor(fast[key]), torch.tensor(steps[key]), rtol=tol, atol=tol)
    assert min(fast["grad_norms"]) > 0
    for a, b in zip(*outs, strict=True):  # and the training step itself is the same
        torch.testing.assert_close(a, b, rtol=10 * tol, atol=10 * tol)


def test_fast_capture_without_a_backward_and_on_long_sequences():
    from workers.probes.hidden import MAX_POINTS, hidden_payload

    torch.manual_seed(0)
    model = build_model(_spec("adding", "layer", "lstm", hidden_size=8), TASKS["adding"], 3, 1)
    model.capture = "fast"
    with torch.no_grad():  # evaluation: every c_t is still kept for the record; no ∂L/∂h_t
        model(_input("sequence", steps=MAX_POINTS + 40))
    payload = hidden_payload(model)
    assert payload["time_steps"] == MAX_POINTS + 40 and payload["time_index"][-1] == MAX_POINTS + 39
    n = len(payload["time_index"])
    assert len(payload["cell_norms"]) == n and payload["grad_norms"] == [0.0] * n
    assert min(payload["cell_norms"]) > 0


@pytest.mark.parametrize("task,cls,prefix", [("digits", MLP, "hidden"), ("conv-digits", ConvNet, "conv")])
def test_feedforward_capture_layers(task, cls, prefix):
    info = TASKS[task]
    model = build_model(_spec(task, "layer"), info, 10, 3)
    assert isinstance(model, cls) and model.capture is False
    model.capture = True
    model(_input(info.kind))
    layers = model.captured["layers"]
    assert [entry["name"] for entry in layers] == [f"{prefix}1", f"{prefix}2"]
    for entry in layers:
        assert set(entry) == {"name", "summed_mean", "summed_std", "act_norm"}
        assert all(isinstance(entry[k], float) for k in ("summed_mean", "summed_std", "act_norm"))


def test_mlp_normalizes_hidden_layers_only():
    model = build_model(_spec("digits", "layer"), TASKS["digits"], 10, 3)
    assert all(isinstance(layer, NormLinear) and isinstance(layer.norm, LayerNorm) for layer in model.hidden)
    assert type(model.out) is torch.nn.Linear  # the logits are never normalized


def test_recurrent_batchnorm_report_beyond_trained_length():
    torch.manual_seed(0)
    model = build_model(_spec("adding", "batch", "lstm", seq_len=5), TASKS["adding"], 3, 1)
    assert isinstance(model, RecurrentNet)
    model(_input("sequence"))
    model.eval()
    with torch.no_grad():
        out = model(_input("sequence", steps=8))
    assert torch.isfinite(out).all()
    report = model.batchnorm_report()
    assert report["trained_steps"] == 5 and report["eval_steps_beyond"] == 3
    assert build_model(_spec("adding", "layer", "lstm"), TASKS["adding"], 3, 1).batchnorm_report() is None


def test_gain_init_reaches_every_normalizer():
    model = build_model(_spec("adding", "batch", "lstm", gain_init=0.1), TASKS["adding"], 3, 1)
    gains = [p for n, p in model.named_parameters() if n.endswith("gain")]
    assert len(gains) == 2 * 3 and all(torch.allclose(g, torch.full_like(g, 0.1)) for g in gains)


def test_unresolved_spec_is_refused():
    with pytest.raises(ValueError, match="resolved"):
        build_model(RunSpec(task="digits"), TASKS["digits"], 10, 3)
