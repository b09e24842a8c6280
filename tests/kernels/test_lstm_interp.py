"""The fused LN-LSTM cell under TRITON_INTERPRET=1 on CPU: vs the torch reference cell and float64."""

import pytest
import torch

import kernels
from kernels.reference import ln_lstm_cell_reference

pytestmark = pytest.mark.usefixtures("interp")


def _cell_inputs(gen, B, H, dtype=torch.float32, pdtype=None):
    """hh, xx, c_prev and the seven parameters (float64 draws, then cast), summed inputs off-centre."""
    pdtype = pdtype or dtype

    def draw(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift

    acts = [
        draw(B, 4 * H, scale=3, shift=1).to(dtype),
        draw(B, 4 * H, scale=0.5, shift=-2).to(dtype),
        draw(B, H).to(dtype),
    ]
    params = [
        draw(4 * H, scale=0.3, shift=1),
        draw(4 * H, scale=0.2),
        draw(4 * H, scale=0.3, shift=1),
        draw(4 * H, scale=0.2),
        draw(4 * H, scale=0.5),
        draw(H, scale=0.3, shift=1),
        draw(H, scale=0.2),
    ]
    return acts + [p.to(pdtype) for p in params]


def _run(cell, inputs, dh, dc):
    """(h, c, grads of every input) of one step with upstream gradients dh, dc."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    h, c = cell(*leaves, 1e-5)
    (h.double() * dh).sum().add_((c.double() * dc).sum()).backward()
    return [h.detach(), c.detach()] + [t.grad for t in leaves]


def _upstream(gen, B, H):
    return torch.randn(B, H, generator=gen, dtype=torch.float64), torch.randn(
        B, H, generator=gen, dtype=torch.float64
    )


@pytest.mark.parametrize("B,H", [(5, 12), (3, 32)])
def test_fused_cell_matches_reference_cell_and_float64(gen, B, H):
    inputs = _cell_inputs(gen, B, H)
    dh, dc = _upstream(gen, B, H)
    got = _run(kernels.triton_ln_lstm_cell, inputs, dh, dc)
    ref32 = _run(ln_lstm_cell_reference, inputs, dh, dc)
    ref64 = _run(ln_lstm_cell_reference, [t.double() for t in inputs], dh, dc)
    names = [
        "h",
        "c",
        "hh",
        "xx",
        "c_prev",
        "gain_h",
        "bias_h",
        "gain_x",
        "bias_x",
        "bias",
        "gain_c",
        "bias_c",
    ]
    for name, g, r32, r64 in zip(names, got, ref32, ref64, strict=True):
        assert g.dtype == r32.dtype, name
        torch.testing.assert_close(g, r32, atol=2e-5, rtol=2e-5, msg=lambda m, n=name: f"{n} vs fp32: {m}")
        torch.testing.assert_close(g.double(), r64, atol=2e-5, rtol=2e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_bf16_activations_with_fp32_parameters(gen):
    B, H = 4, 16
    inputs = _cell_inputs(gen, B, H, torch.bfloat16, torch.float32)
    dh, dc = _upstream(gen, B, H)
    got = _run(kernels.triton_ln_lstm_cell, inputs, dh, dc)
    ref64 = _run(ln_lstm_cell_reference, [t.double() for t in inputs], dh, dc)
    assert got[0].dtype == torch.bfloat16 and got[5].dtype == torch.float32
    for g, r in zip(got, ref64, strict=True):
        # bf16 keeps 8 bits: outputs and activation grads round to ~4e-3 relative; parameter grads sum B rows.
        torch.testing.assert_close(g.double(), r, atol=5e-2, rtol=3e-2)


def test_parameter_gradients_are_bitwise_deterministic(gen):
    inputs = _cell_inputs(gen, 9, 12)  # 9 rows over 4 persistent programs
    dh, dc = _upstream(gen, 9, 12)
    first, second = (_run(kernels.triton_ln_lstm_cell, inputs, dh, dc) for _ in range(2))
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


def test_three_step_unroll_matches_reference(gen):
    # Gradients flow through h_t and c_t across steps: the fused backward's dc input and dc_prev output.
    B, H, T = 3, 8, 3
    w_h = torch.randn(4 * H, H, generator=gen, dtype=torch.float64) * 0.5
    xs = [torch.randn(B, 4 * H, generator=gen, dtype=torch.float64) for _ in range(T)]
    params = _cell_inputs(gen, B, H, torch.float64)[3:]

    def unroll(cell, dtype):
        ps = [p.to(dtype).requires_grad_() for p in params]
        wh = w_h.to(dtype).requires_grad_()
        h = torch.zeros(B, H, dtype=dtype)
        c = torch.zeros(B, H, dtype=dtype)
        loss = 0
        for x in xs:
            h, c = cell(h @ wh.t(), x.to(dtype), c, *ps, 1e-5)
            loss = loss + (h.double() ** 2).sum() + c.double().sum()
        loss.backward()
        return [h.detach(), c.detach(), wh.grad] + [p.grad for p in ps]

    for g, r in zip(
        unroll(kernels.triton_ln_lstm_cell, torch.float32),
        unroll(ln_lstm_cell_reference, torch.float64),
        strict=True,
    ):
        torch.testing.assert_close(g.double(), r, atol=1e-4, rtol=1e-4)


def test_shape_errors_say_what_to_change(gen):
    hh, xx, cp, *ps = _cell_inputs(gen, 2, 4)
    with pytest.raises(ValueError, match=r"hh and xx must be \(B, 4H\)"):
        kernels.triton_ln_lstm_cell(hh[:, :8], xx, cp, *ps)
    with pytest.raises(ValueError, match="gain_c must have shape"):
        kernels.triton_ln_lstm_cell(hh, xx, cp, *ps[:5], ps[0], ps[6])


def test_cell_traces_without_graph_break(gen):
    inputs = _cell_inputs(gen, 2, 8)
    kernels.triton_ln_lstm_cell(*inputs)

    def step(*args):
        h, c = kernels.triton_ln_lstm_cell(*args)
        return (h * c).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    dh = torch.zeros(2, 8, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in inputs]
    compiled(*leaves).backward()
    want = _run(
        lambda *a: (lambda h, c: (h * c, torch.zeros_like(c)))(*kernels.triton_ln_lstm_cell(*a)),
        inputs,
        dh + 1,
        dh,
    )
    for t, w in zip(leaves, want[2:], strict=True):
        torch.testing.assert_close(t.grad, w, atol=1e-6, rtol=1e-6)
