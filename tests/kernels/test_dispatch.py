"""`kernels.layer_norm` / `ln_lstm_cell` dispatch: torch for CPU tensors, the backend setting, no triton."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernels


def test_cpu_tensors_use_torch_and_match_f_layer_norm(gen):
    x = torch.randn(4, 33, generator=gen)
    w, b = torch.randn(33, generator=gen), torch.randn(33, generator=gen)
    assert kernels.backend_for(x) == "torch"
    torch.testing.assert_close(
        kernels.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (33,), w, b, 1e-5), atol=0, rtol=0
    )


def test_ln_lstm_cell_on_cpu_is_the_differentiable_reference(gen):
    B, H = 3, 5
    hh, xx = torch.randn(B, 4 * H, generator=gen), torch.randn(B, 4 * H, generator=gen)
    cp = torch.randn(B, H, generator=gen)
    params = [torch.randn(4 * H, generator=gen).requires_grad_() for _ in range(5)]
    params += [torch.randn(H, generator=gen).requires_grad_() for _ in range(2)]
    h, c = kernels.ln_lstm_cell(hh, xx, cp, *params, 1e-5)
    hr, cr = kernels.ln_lstm_cell_reference(hh, xx, cp, *params, 1e-5)
    assert torch.equal(h, hr) and torch.equal(c, cr)
    (h.sum() + c.sum()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)


def test_reference_cell_follows_eq_20_written_out(gen):
    # The oracle itself, against the equations in float64: gates (f, i, o, g), LN with population variance.
    B, H, eps = 2, 3, 1e-5
    hh, xx = torch.randn(B, 4 * H, generator=gen).double(), torch.randn(B, 4 * H, generator=gen).double()
    cp = torch.randn(B, H, generator=gen).double()
    gh, bh, gx, bx, b = (torch.randn(4 * H, generator=gen).double() for _ in range(5))
    gc, bc = (torch.randn(H, generator=gen).double() for _ in range(2))

    def ln(a, g, s):
        mu = a.sum(-1, keepdim=True) / a.shape[-1]
        sigma = (((a - mu) ** 2).sum(-1, keepdim=True) / a.shape[-1] + eps).sqrt()
        return g * (a - mu) / sigma + s

    a = ln(hh, gh, bh) + ln(xx, gx, bx) + b
    f, i, o, g = (
        a[:, :H].sigmoid(),
        a[:, H : 2 * H].sigmoid(),
        a[:, 2 * H : 3 * H].sigmoid(),
        a[:, 3 * H :].tanh(),
    )
    c = f * cp + i * g
    h = o * ln(c, gc, bc).tanh()
    hr, cr = kernels.ln_lstm_cell_reference(hh, xx, cp, gh, bh, gx, bx, b, gc, bc, eps)
    torch.testing.assert_close(hr, h, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(cr, c, atol=1e-12, rtol=1e-12)


def test_gru_reference_follows_eq_26_written_out(gen):
    B, H, eps = 2, 3, 1e-5
    zr_h, zr_x = (torch.randn(B, 2 * H, generator=gen).double() for _ in range(2))
    wx, uh, hp = (torch.randn(B, H, generator=gen).double() for _ in range(3))
    g1, b1, g2, b2 = (torch.randn(2 * H, generator=gen).double() for _ in range(4))
    g3, b3, g4, b4 = (torch.randn(H, generator=gen).double() for _ in range(4))

    def ln(a, g, s):
        mu = a.mean(-1, keepdim=True)
        return g * (a - mu) / (((a - mu) ** 2).mean(-1, keepdim=True) + eps).sqrt() + s

    zr = ln(zr_h, g1, b1) + ln(zr_x, g2, b2)
    z, r = zr[:, :H].sigmoid(), zr[:, H:].sigmoid()
    h = (1 - z) * hp + z * (ln(wx, g3, b3) + r * ln(uh, g4, b4)).tanh()
    args = (zr_h, zr_x, wx, uh, hp, g1, b1, g2, b2, g3, b3, g4, b4, eps)
    torch.testing.assert_close(kernels.ln_gru_cell_reference(*args), h, atol=1e-12, rtol=1e-12)
    assert torch.equal(kernels.ln_gru_cell(*args), kernels.ln_gru_cell_reference(*args))  # CPU ⇒ torch


def test_set_backend_validates_and_forces_torch(gen):
    with pytest.raises(ValueError, match="use 'auto', 'torch' or 'triton'"):
        kernels.set_backend("cuda")
    kernels.set_backend("torch")
    assert kernels.get_backend() == "torch"
    assert kernels.backend_for(torch.zeros(2)) == "torch"
    if torch.cuda.is_available():
        assert kernels.backend_for(torch.zeros(2, device="cuda")) == "torch"
    kernels.set_backend("auto")
    assert kernels.backend_for(torch.zeros(2)) == "torch"  # CPU tensors always get torch


def test_package_imports_and_falls_back_without_triton():
    # A CPU-only install may lack triton: import kernels with triton blocked and use both entry points.
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, kernels\n"
        "assert not kernels.triton_available()\n"
        "x = torch.randn(2, 8)\n"
        "assert kernels.backend_for(x) == 'torch'\n"
        "y = kernels.layer_norm(x, None, None, 1e-5)\n"
        "h, c = kernels.ln_lstm_cell(torch.randn(2, 8), torch.randn(2, 8), torch.randn(2, 2),"
        " *[torch.ones(8)] * 5, torch.ones(2), torch.zeros(2), 1e-5)\n"
        "try:\n    kernels.set_backend('triton')\nexcept ValueError as e:\n    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "refused: kernel backend 'triton' needs the triton package" in out.stdout


def test_layer_norm_launches_are_cached_and_wide_sums_spread_out(monkeypatch):
    # Plain Python (no kernel runs): the launch heuristics of kernels.ln_launch.
    pytest.importorskip("triton")
    from kernels import ln_launch as op

    assert op._fwd_launch(4096, 8192, 0) is op._fwd_launch(4096, 8192, 0)  # computed once per shape
    cfg = op.fwd_config(4096, 8192)
    cfg["grid"] = -1  # callers get a copy: the cached launch stays as it was
    assert op.fwd_config(4096, 8192)["grid"] == op._fwd_launch(4096, 8192, 0).grid > 0
    # The H200 case that took 2 × 77 µs (8 programs each walking all 264 partial rows): one launch now,
    # dγ and dβ slabs side by side, with at least a program per persistent slot.
    monkeypatch.setattr(op, "persistent_programs", lambda device: 264)
    s = op._sum_launch.__wrapped__(264, 8192, 2, torch.device("cuda"))
    assert s.grid[1] == 2 and s.grid[0] * s.BLOCK_C >= 8192 and (s.grid[0] - 1) * s.BLOCK_C < 8192
    assert s.grid[0] * s.grid[1] >= 264 and s.BLOCK_C <= 128 and s.BLOCK_P == 32
    tiny = op._sum_launch.__wrapped__(3, 7, 1, torch.device("cuda"))
    assert tiny.BLOCK_P == 4 and tiny.BLOCK_C == 16 and tiny.grid == (1, 1)
    # The backward pipelines its loops where 16-byte loads apply: N a multiple of 16, or odd N up to the
    # resident limit through the shifted kernel; the split tier at odd N loads element by element, where
    # pipelining spilled (ptxas -v), so it stays unpipelined. The forward takes no such flag.
    cpu = torch.device("cpu")
    launches = [op._bwd_launch(64, n, cpu) for n in (4096, 1000, 4099, 65536, 20001, 7)]
    assert [c.kernel for c in launches] == ["resident", "shifted", "shifted", "split", "split", "resident"]
    assert [c.STAGES for c in launches] == [2, 2, 2, 2, 1, 1]
    # rows longer than the resident limit: segments of SPLIT_BLOCK columns covering the row exactly once
    from kernels.ln_bwd_triton import MAX_RESIDENT_BWD
    from kernels.ln_split_triton import SPLIT_BLOCK

    for n in (MAX_RESIDENT_BWD + 1, 12288, 20001, 65536):
        c = op._bwd_launch(64, n, cpu)
        assert c.BLOCK_N == SPLIT_BLOCK and (c.SEGMENTS - 1) * SPLIT_BLOCK < n <= c.SEGMENTS * SPLIT_BLOCK
    assert op._bwd_launch(64, MAX_RESIDENT_BWD, cpu).kernel == "resident"
    # the shifted backward's grid: a multiple of 8 (rows of a program share their alignment) or M itself
    monkeypatch.setattr(op, "persistent_programs", lambda device: 132)
    assert op._bwd_launch.__wrapped__(4096, 4099, cpu).grid == 128
    assert op._bwd_launch.__wrapped__(5, 4099, cpu).grid == 5
    assert op._bwd_launch(64, 4099, cpu, op.TIERS["resident"]).kernel == "resident"  # the fallback


def test_forward_tiles_cover_every_aligned_body_with_less_padding_than_a_power_of_two():
    # Plain Python: ln_launch.tiles for every row length of the shifted forward's range.
    pytest.importorskip("triton")
    from kernels import ln_launch, ln_triton

    padded = unpadded = 0
    for n in range(ln_triton.MIN_SHIFTED, ln_triton.MAX_RESIDENT + 1):
        a, b, c = ln_launch.tiles(n)
        assert all(t == 0 or (t >= 16 and t & (t - 1) == 0) for t in (a, b, c)), n
        assert a >= b and (b or not c or c >= 16), n
        # an fp32 row's aligned body is at most n − n % 4 elements (bf16/fp16: n − n % 8)
        pow2 = 1 << (n - 1).bit_length()
        assert n - n % 4 <= a + b + c <= pow2, n
        padded += pow2
        unpadded += a + b + c
    assert unpadded < 0.85 * padded  # lanes run over the range: at least 15 % fewer than padding
    # launches use them where they save ≥ a quarter of the lanes; else one power-of-two tile, as before
    assert ln_launch._fwd_launch(64, 5120, 0).TILES == (4096, 1024, 0)
    cfg = ln_launch._fwd_launch(64, 2041, 0)
    assert cfg.kernel == "shifted" and cfg.TILES == (2048, 0, 0) and cfg.num_warps == 8
    assert ln_launch._bwd_launch(64, 5120, torch.device("cpu")).TILES == (4096, 1024, 0)
    assert ln_launch._fwd_launch(64, 4096, 0).kernel == "resident"  # a power of two needs no tiles
