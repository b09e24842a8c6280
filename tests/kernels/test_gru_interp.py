"""The fused LN-GRU cell (eq. 26) under TRITON_INTERPRET=1 on CPU: vs the torch reference and float64."""

import pytest
import torch

import kernels
from kernels.reference import ln_gru_cell_reference

pytestmark = pytest.mark.usefixtures("interp")


def _inputs(gen, B, H, dtype=torch.float32, pdtype=None):
    pdtype = pdtype or dtype

    def r(*shape, s=1.0, m=0.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * s + m

    acts = [r(B, 2 * H, s=2, m=1), r(B, 2 * H), r(B, H, s=3), r(B, H, m=-1), r(B, H)]
    params = [
        r(2 * H, s=0.3, m=1),
        r(2 * H, s=0.2),
        r(2 * H, s=0.3, m=1),
        r(2 * H, s=0.2),
        r(H, s=0.3, m=1),
        r(H, s=0.2),
        r(H, s=0.3, m=1),
        r(H, s=0.2),
    ]
    return [a.to(dtype) for a in acts] + [p.to(pdtype) for p in params]


def _run(cell, inputs, dh):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    h = cell(*leaves, 1e-5)
    (h.double() * dh).sum().backward()
    return [h.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("B,H", [(5, 12), (2, 32)])
def test_fused_gru_cell_matches_reference_and_float64(gen, B, H):
    inputs = _inputs(gen, B, H)
    dh = torch.randn(B, H, generator=gen, dtype=torch.float64)
    got = _run(kernels.triton_ln_gru_cell, inputs, dh)
    ref32 = _run(ln_gru_cell_reference, inputs, dh)
    ref64 = _run(ln_gru_cell_reference, [t.double() for t in inputs], dh)
    for k, (g, r32, r64) in enumerate(zip(got, ref32, ref64, strict=True)):
        assert g.dtype == r32.dtype
        torch.testing.assert_close(g, r32, atol=2e-5, rtol=2e-5, msg=lambda m, k=k: f"#{k} vs fp32: {m}")
        torch.testing.assert_close(g.double(), r64, atol=2e-5, rtol=2e-5, msg=lambda m, k=k: f"#{k}: {m}")


def test_bf16_activations_fp32_parameters_and_determinism(gen):
    inputs = _inputs(gen, 6, 16, torch.bfloat16, torch.float32)
    dh = torch.randn(6, 16, generator=gen, dtype=torch.float64)
    first, second = (_run(kernels.triton_ln_gru_cell, inputs, dh) for _ in range(2))
    ref64 = _run(ln_gru_cell_reference, [t.double() for t in inputs], dh)
    assert first[0].dtype == torch.bfloat16 and first[6].dtype == torch.float32
    for a, b, r in zip(first, second, ref64, strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(a.double(), r, atol=5e-2, rtol=3e-2)


def test_shape_errors_say_what_to_change(gen):
    zr_h, zr_x, wx, uh, hp, *ps = _inputs(gen, 2, 4)
    with pytest.raises(ValueError, match=r"zr_x must be \(2, 8\)"):
        kernels.triton_ln_gru_cell(zr_h, zr_x[:, :4], wx, uh, hp, *ps)
    with pytest.raises(ValueError, match="gain_uh must have shape"):
        kernels.triton_ln_gru_cell(zr_h, zr_x, wx, uh, hp, *ps[:6], ps[0], ps[7])
