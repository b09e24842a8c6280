"""The fused LN-GRU sequence (one autograd node over T steps) under TRITON_INTERPRET=1 on CPU.

Against the torch reference cell unrolled in float64 (values and every gradient, including those carried
across steps through h_t and the partials added over steps), the per-step fused cell, bitwise repeats,
the engine's GRU layer, and the errors a caller gets for wrong shapes.
"""

import pytest
import torch

import kernels
from kernels.reference import ln_gru_cell_reference

pytestmark = pytest.mark.usefixtures("interp")


def _unrolled(cell):
    def run(ax, w_rec, *rest):
        *params, h, eps = rest
        H = h.shape[1]
        hs = []
        for t in range(ax.shape[0]):
            rec = h @ w_rec.t()
            h = cell(rec[:, : 2 * H], ax[t, :, : 2 * H], ax[t, :, 2 * H :], rec[:, 2 * H :], h, *params, eps)
            hs.append(h)
        return torch.stack(hs)

    return run


def _run(fn, inputs, d_out):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    hs = fn(*leaves, 1e-5)
    (hs.double() * d_out).sum().backward()
    return [hs.detach()] + [t.grad for t in leaves]


NAMES = [
    "hs",
    "ax",
    "w_rec",
    "gain_zr_h",
    "bias_zr_h",
    "gain_zr_x",
    "bias_zr_x",
    "gain_wx",
    "bias_wx",
    "gain_uh",
    "bias_uh",
    "h0",
]


@pytest.mark.parametrize("T,B,H", [(5, 3, 8), (4, 9, 12), (1, 2, 4)])
def test_sequence_matches_float64_reference(gen, sequence_inputs, T, B, H):
    inputs = sequence_inputs("gru", T, B, H)
    d_out = torch.randn(T, B, H, generator=gen, dtype=torch.float64)
    got = _run(kernels.triton_ln_gru_sequence, [t.float() for t in inputs], d_out)
    ref = _run(_unrolled(ln_gru_cell_reference), inputs, d_out)
    for name, g, r in zip(NAMES, got, ref, strict=True):
        assert g.dtype == torch.float32, name
        torch.testing.assert_close(g.double(), r, atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


def test_sequence_equals_the_per_step_cell_and_repeats_bitwise(gen, sequence_inputs):
    inputs = [t.float() for t in sequence_inputs("gru", 4, 9, 8)]  # 9 rows over 4 persistent programs
    d_out = torch.randn(4, 9, 8, generator=gen, dtype=torch.float64)
    seq = _run(kernels.triton_ln_gru_sequence, inputs, d_out)
    cell = _run(_unrolled(kernels.triton_ln_gru_cell), inputs, d_out)
    # the same maths summed in another order (the sequence normalizes its input side before the loop)
    for name, a, b in zip(NAMES, seq, cell, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    again = _run(kernels.triton_ln_gru_sequence, inputs, d_out)
    for name, a, b in zip(NAMES, seq, again, strict=True):
        assert torch.equal(a, b), name


def test_engine_gru_layer_runs_the_fused_sequence(gen, fused_vs_torch):
    (got,), ref, calls = fused_vs_torch("gru", torch.randn(5, 3, 6, generator=gen), 8, force=True)
    assert calls == 1, "the fused sequence was not used"
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)


def test_reference_dispatch_and_shape_errors(sequence_inputs):
    ax, w_rec, *params, h0 = [t.float() for t in sequence_inputs("gru", 3, 2, 4)]
    with torch.no_grad():
        torch.testing.assert_close(
            kernels.triton_ln_gru_sequence(ax, w_rec, *params, h0),
            kernels.ln_gru_sequence(ax, w_rec, *params, h0),
            atol=1e-5,
            rtol=1e-5,
        )
    with pytest.raises(ValueError, match=r"w_rec must be \[W_h; U\]"):
        kernels.triton_ln_gru_sequence(ax, w_rec[:8], *params, h0)
    with pytest.raises(ValueError, match=r"expects ax \(T, B, 3H\)"):
        kernels.triton_ln_gru_sequence(ax[..., :-1], w_rec, *params, h0)
    with pytest.raises(ValueError, match="gain_wx must have shape"):
        kernels.triton_ln_gru_sequence(ax, w_rec, *params[:4], params[0], *params[5:], h0)


def test_input_side_is_two_layer_norms_each_way_outside_the_loop(gen, sequence_inputs, monkeypatch):
    # T = 5: LN(W_x x) over 2H and LN(W x) over H, one launch each forward and backward for all T·B rows;
    # every per-step cell reads the hoisted input side.
    from kernels import gru_triton, layer_norm_op, layer_norm_triton
    from kernels.launch import PlanCache

    monkeypatch.setattr(layer_norm_op, "PLANS", PlanCache())  # plans hold the kernels they were built with

    counts = {"_ln_fwd": 0, "_ln_bwd": 0}
    hoisted = []
    for name in counts:
        monkeypatch.setattr(layer_norm_triton, name, _Counted(getattr(layer_norm_triton, name), name, counts))
    for name in ("_ln_gru_fwd", "_ln_gru_bwd"):
        monkeypatch.setattr(gru_triton, name, _Counted(getattr(gru_triton, name), name, counts, hoisted))
    T, B, H = 5, 3, 8
    inputs = [t.float() for t in sequence_inputs("gru", T, B, H)]
    _run(kernels.triton_ln_gru_sequence, inputs, torch.randn(T, B, H, generator=gen, dtype=torch.float64))
    assert counts == {"_ln_fwd": 2, "_ln_bwd": 2, "_ln_gru_fwd": T, "_ln_gru_bwd": T}
    assert hoisted == [True] * (2 * T)


class _Counted:
    """A Triton kernel object that counts its launches (and records their HOISTED flag), then launches."""

    def __init__(self, kernel, name, counts, hoisted=None):
        self.kernel, self.name, self.counts, self.hoisted = kernel, name, counts, hoisted

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.counts[self.name] = self.counts.get(self.name, 0) + 1
            if self.hoisted is not None:
                self.hoisted.append(kwargs["HOISTED"])
            return self.kernel[grid](*args, **kwargs)

        return launch
