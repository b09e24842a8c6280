"""The fused LN-LSTM sequence (one autograd node over T steps) under TRITON_INTERPRET=1 on CPU.

Checked against the torch reference cell unrolled in float64 (values and every gradient, including
those carried across steps through h_t and c_t and the partials accumulated over steps), against the
per-step fused cell, bitwise repeatability, and the errors a caller gets for wrong shapes.
"""

import pytest
import torch

import kernels
from kernels.reference import ln_lstm_cell_reference

pytestmark = pytest.mark.usefixtures("interp")


def _reference_sequence(ax, w_h, gh, bh, gx, bx, b, gc, bc, h0, c0, eps):
    h, c, hs = h0, c0, []
    for t in range(ax.shape[0]):
        h, c = ln_lstm_cell_reference(h @ w_h.t(), ax[t], c, gh, bh, gx, bx, b, gc, bc, eps)
        hs.append(h)
    return torch.stack(hs)


def _cell_sequence(ax, w_h, gh, bh, gx, bx, b, gc, bc, h0, c0, eps):
    h, c, hs = h0, c0, []
    for t in range(ax.shape[0]):
        h, c = kernels.triton_ln_lstm_cell(h @ w_h.t(), ax[t], c, gh, bh, gx, bx, b, gc, bc, eps)
        hs.append(h)
    return torch.stack(hs)


def _run(fn, inputs, d_out):
    """(hs, grads of every input) with upstream gradient d_out on hs."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    hs = fn(*leaves, 1e-5)
    (hs.double() * d_out).sum().backward()
    return [hs.detach()] + [t.grad for t in leaves]


NAMES = ["hs", "ax", "w_h", "gain_h", "bias_h", "gain_x", "bias_x", "bias", "gain_c", "bias_c", "h0", "c0"]


@pytest.mark.parametrize("T,B,H", [(5, 3, 8), (4, 9, 12), (1, 2, 4)])
def test_sequence_matches_float64_reference(gen, sequence_inputs, T, B, H):
    inputs = sequence_inputs("lstm", T, B, H)
    d_out = torch.randn(T, B, H, generator=gen, dtype=torch.float64)
    got = _run(kernels.triton_ln_lstm_sequence, [t.float() for t in inputs], d_out)
    ref = _run(_reference_sequence, inputs, d_out)
    for name, g, r in zip(NAMES, got, ref, strict=True):
        assert g.dtype == torch.float32, name
        torch.testing.assert_close(g.double(), r, atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


def test_sequence_equals_the_per_step_cell(gen, sequence_inputs):
    # The same maths, summed in another order: the sequence normalizes the input side for all steps
    # before the loop (and sums its gradients after it), the cell inside each step. Float32 rounding apart.
    inputs = [t.float() for t in sequence_inputs("lstm", 4, 5, 8)]
    d_out = torch.randn(4, 5, 8, generator=gen, dtype=torch.float64)
    seq = _run(kernels.triton_ln_lstm_sequence, inputs, d_out)
    cell = _run(_cell_sequence, inputs, d_out)
    for name, a, b in zip(NAMES, seq, cell, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


class _Recording:
    """Wraps a Triton kernel object: records each launch's grid and keyword arguments, then launches."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, kwargs))
            return self.kernel[grid](*args, **kwargs)

        return launch


def test_input_side_is_one_layer_norm_each_way_outside_the_loop(gen, sequence_inputs, monkeypatch):
    # T = 6 steps: the per-step cells read the hoisted input side (HOISTED), and LN(x W_xᵀ) runs as one
    # LayerNorm launch over all T·B rows forward and one backward (its dγ/dβ sum is a third), not per step.
    from kernels import layer_norm_op, layer_norm_triton, lstm_triton
    from kernels.launch import PlanCache

    monkeypatch.setattr(layer_norm_op, "PLANS", PlanCache())  # plans hold the kernels they were built with

    recorded = {}
    for name in ("_ln_fwd", "_ln_bwd"):
        recorded[name] = _Recording(getattr(layer_norm_triton, name))
        monkeypatch.setattr(layer_norm_triton, name, recorded[name])
    for name in ("_ln_lstm_fwd", "_ln_lstm_bwd"):
        recorded[name] = _Recording(getattr(lstm_triton, name))
        monkeypatch.setattr(lstm_triton, name, recorded[name])
    T, B, H = 6, 3, 8
    inputs = [t.float() for t in sequence_inputs("lstm", T, B, H)]
    _run(kernels.triton_ln_lstm_sequence, inputs, torch.randn(T, B, H, generator=gen, dtype=torch.float64))
    counts = {name: len(r.launches) for name, r in recorded.items()}
    assert counts == {"_ln_fwd": 1, "_ln_bwd": 1, "_ln_lstm_fwd": T, "_ln_lstm_bwd": T}
    fwd_grid = recorded["_ln_fwd"].launches[0][0]
    assert fwd_grid[0] * recorded["_ln_fwd"].launches[0][1]["ROWS"] >= T * B  # all rows in one
    assert all(
        kw["HOISTED"] for name in ("_ln_lstm_fwd", "_ln_lstm_bwd") for _, kw in recorded[name].launches
    )


def test_sequence_gradients_are_bitwise_deterministic(gen, sequence_inputs):
    inputs = [t.float() for t in sequence_inputs("lstm", 3, 9, 8)]  # 9 rows over 4 persistent programs
    d_out = torch.randn(3, 9, 8, generator=gen, dtype=torch.float64)
    first, second = (_run(kernels.triton_ln_lstm_sequence, inputs, d_out) for _ in range(2))
    for name, a, b in zip(NAMES, first, second, strict=True):
        assert torch.equal(a, b), name


def test_bf16_sequence_with_fp32_parameters(gen, sequence_inputs):
    T, B, H = 3, 4, 8
    inputs = sequence_inputs("lstm", T, B, H)
    mixed = (
        [t.bfloat16() for t in inputs[:2]]
        + [t.float() for t in inputs[2:9]]
        + [t.bfloat16() for t in inputs[9:]]
    )
    d_out = torch.randn(T, B, H, generator=gen, dtype=torch.float64)
    got = _run(kernels.triton_ln_lstm_sequence, mixed, d_out)
    ref = _run(_reference_sequence, inputs, d_out)
    assert got[0].dtype == torch.bfloat16 and got[3].dtype == torch.float32
    for name, g, r in zip(NAMES, got, ref, strict=True):
        # bf16 keeps 8 bits; the products W_h h run in bf16 too, so errors compound over the steps.
        torch.testing.assert_close(g.double(), r, atol=0.15, rtol=0.1, msg=lambda m, n=name: f"{n}: {m}")


def test_dispatch_and_eval_without_grad(sequence_inputs):
    inputs = [t.float() for t in sequence_inputs("lstm", 3, 2, 4)]
    with torch.no_grad():
        hs = kernels.triton_ln_lstm_sequence(*inputs)
    # CPU tensors: the public dispatcher takes the torch reference path (backend 'torch' off CUDA)
    torch.testing.assert_close(hs, kernels.ln_lstm_sequence(*inputs), atol=1e-5, rtol=1e-5)


def test_sequence_shape_errors_say_what_to_change(sequence_inputs):
    ax, w_h, *params, h0, c0 = [t.float() for t in sequence_inputs("lstm", 2, 3, 4)]
    with pytest.raises(ValueError, match=r"w_h must be \(4H, H\)"):
        kernels.triton_ln_lstm_sequence(ax, w_h[:, :3], *params, h0, c0)
    with pytest.raises(ValueError, match=r"h0 must be \(B, H\)"):
        kernels.triton_ln_lstm_sequence(ax, w_h, *params, h0[:2], c0)
    with pytest.raises(ValueError, match=r"expects ax \(T, B, 4H\)"):
        kernels.triton_ln_lstm_sequence(ax[0], w_h, *params, h0, c0)
    with pytest.raises(TypeError, match="must match ax's dtype"):
        kernels.triton_ln_lstm_sequence(ax, w_h.double(), *params, h0, c0)


def test_engine_lstm_layer_runs_the_fused_sequence(gen, fused_vs_torch):
    # The engine's LN-LSTM takes the fused sequence when the kernels' backend is Triton (CUDA tensors; here
    # forced for CPU tensors under the interpreter): same numbers as its torch path.
    (got,), ref, calls = fused_vs_torch("lstm", torch.randn(5, 3, 6, generator=gen), 8, force=True)
    assert calls == 1, "the fused sequence was not used"
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)
