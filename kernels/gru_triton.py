"""Triton kernels of the fused LN-GRU cell (the paper's eq. 26): one launch forward, two backward.

Forward, per batch row (one program per row), hidden size H, gate order (z, r):
    n₁ = LN₀(zr_h) over 2H,  n₂ = LN₀(zr_x) over 2H       zr_h = W_h h_{t-1}, zr_x = W_x x_t
    (z, r) = σ(n₁ γ₁ + β₁ + n₂ γ₂ + β₂)
    n₃ = LN₀(wx) over H,  n₄ = LN₀(uh) over H              wx = W x_t, uh = U h_{t-1}
    ℓ₃ = n₃ γ₃ + β₃,  ℓ₄ = n₄ γ₄ + β₄,  ĥ = tanh(ℓ₃ + r ⊙ ℓ₄),  h = (1 − z) ⊙ h_{t-1} + z ⊙ ĥ
Saved per row: the four (μ, rstd) pairs in fp32. Backward (dh), per row:
    dĥ = dh z;  dp = dĥ (1 − ĥ²);  dℓ₃ = dp;  dℓ₄ = dp r;  da_r = dp ℓ₄ r(1 − r)
    da_z = dh (ĥ − h_{t-1}) z(1 − z)
    dh_{t-1} = dh (1 − z);  dγ₃ = dℓ₃ n₃, dβ₃ = dℓ₃;  dγ₄ = dℓ₄ n₄, dβ₄ = dℓ₄;  dβ₁ = dβ₂ = da;  dγ₁ = da n₁ …
    and each LN input gradient rstd·(dn − mean(dn) − n ⊙ mean(dn ⊙ n)) with dn = dℓ γ.
Parameter gradients: per-row fp32 partials [B, 10H] = [dγ₁ | dγ₂ | dβ₁₂ | dγ₃ | dβ₃ | dγ₄ | dβ₄], then the
fixed-order column sum of ln_triton.py (deterministic, no atomics). With ACC the backward adds to them, and
its outputs take row strides: a whole sequence (gru_seq_op) writes ∂L/∂[zr_h | uh] and ∂L/∂[zr_x | wx] into
(B, 3H) rows, one product each way, and sums the partials once.
HOISTED (the sequence): the input side does not depend on h, so the caller computes xg = LN(zr_x) γ₂ + β₂ + β₁
(2H) and xc = LN(wx) γ₃ + β₃ (H) for all T·B rows before the loop (two LayerNorm launches); the cell reads
them in place of zr_x and wx, keeps partials [B, 4H] = [dγ₁ | dγ₄ | dβ₄], and writes da_zr = ∂L/∂xg and
dp = ∂L/∂xc where ∂L/∂zr_x and ∂L/∂wx went; two LayerNorm backwards after the loop give ∂L/∂ax, dγ₂, dβ₁₂,
dγ₃, dβ₃.
"""

import triton
import triton.language as tl

from kernels.lstm_triton import _put, _sigmoid, _tanh


@triton.jit
def _normalize1(ptr, cols, ok, H, eps):
    """x̂ of one H-long row with its fp32 μ and rstd (centred two-pass)."""
    a = tl.load(ptr + cols, mask=ok, other=0.0).to(tl.float32)
    mean = tl.sum(a, axis=0) / H
    d = tl.where(ok, a - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / H + eps)
    return d * rstd, mean, rstd


@triton.jit
def _normalize2(ptr, cols, ok, H, eps):
    """x̂ blocks (z, r) of one 2H-long row with its fp32 μ and rstd."""
    a0 = tl.load(ptr + cols, mask=ok, other=0.0).to(tl.float32)
    a1 = tl.load(ptr + H + cols, mask=ok, other=0.0).to(tl.float32)
    mean = (tl.sum(a0, axis=0) + tl.sum(a1, axis=0)) / (2 * H)
    d0 = tl.where(ok, a0 - mean, 0.0)
    d1 = tl.where(ok, a1 - mean, 0.0)
    rstd = 1.0 / tl.sqrt((tl.sum(d0 * d0, axis=0) + tl.sum(d1 * d1, axis=0)) / (2 * H) + eps)
    return d0 * rstd, d1 * rstd, mean, rstd


@triton.jit
def _renorm(ptr, cols, ok, mean, rstd):
    a = tl.load(ptr + cols, mask=ok, other=0.0).to(tl.float32)
    return tl.where(ok, (a - mean) * rstd, 0.0)


@triton.jit
def _vec(ptr, cols, ok):
    return tl.load(ptr + cols, mask=ok, other=0.0).to(tl.float32)


@triton.jit
def _gates(n1z, n1r, n2z, n2r, G1, B1, G2, B2, cols, ok, H):
    """(z, r) from the normalized blocks and the parameters."""
    az = n1z * _vec(G1, cols, ok) + _vec(B1, cols, ok) + n2z * _vec(G2, cols, ok) + _vec(B2, cols, ok)
    ar = (
        n1r * _vec(G1 + H, cols, ok)
        + _vec(B1 + H, cols, ok)
        + n2r * _vec(G2 + H, cols, ok)
        + _vec(B2 + H, cols, ok)
    )
    return _sigmoid(az), _sigmoid(ar)


@triton.jit
def _gates_hoisted(n1z, n1r, G1, XG, cols, ok, H):
    """(z, r) from LN₀(zr_h) and the hoisted xg = LN(zr_x) γ₂ + β₂ + β₁."""
    az = n1z * _vec(G1, cols, ok) + _vec(XG, cols, ok)
    ar = n1r * _vec(G1 + H, cols, ok) + _vec(XG + H, cols, ok)
    return _sigmoid(az), _sigmoid(ar)


@triton.jit
def _ln_gru_fwd(
    ZRH,
    ZRX,  # (B, 2H) W_h h_{t-1} and W_x x_t; row strides stride_zrh / stride_zrx; activation dtype
    WX,
    UH,  # (B, H) W x_t and U h_{t-1}; row strides stride_wx / stride_uh
    H_prev,  # (B, H) h_{t-1}, row stride stride_hp
    G1,
    B1,
    G2,
    B2,  # (2H,) gain / bias of LN(zr_h), LN(zr_x)
    G3,
    B3,
    G4,
    B4,  # (H,) gain / bias of LN(wx), LN(uh)
    H_out,  # (B, H) output h_t, contiguous, activation dtype
    Stats,  # fp32 (B, 8): (μ, rstd) of zr_h, zr_x, wx, uh
    stride_zrh,
    stride_zrx,
    stride_wx,
    stride_uh,
    stride_hp,
    H,
    eps,
    BLOCK_H: tl.constexpr,
    HOISTED: tl.constexpr,  # ZRX, WX hold the hoisted input side xg, xc (module docstring); G2..B3 unread
):
    row = tl.program_id(0)
    r64 = tl.cast(row, tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    n1z, n1r, m1, s1 = _normalize2(ZRH + r64 * stride_zrh, cols, ok, H, eps)
    n4, m4, s4 = _normalize1(UH + r64 * stride_uh, cols, ok, H, eps)
    if HOISTED:
        z, r = _gates_hoisted(n1z, n1r, G1, ZRX + r64 * stride_zrx, cols, ok, H)
        l3 = _vec(WX + r64 * stride_wx, cols, ok)
    else:
        n2z, n2r, m2, s2 = _normalize2(ZRX + r64 * stride_zrx, cols, ok, H, eps)
        n3, m3, s3 = _normalize1(WX + r64 * stride_wx, cols, ok, H, eps)
        z, r = _gates(n1z, n1r, n2z, n2r, G1, B1, G2, B2, cols, ok, H)
        l3 = n3 * _vec(G3, cols, ok) + _vec(B3, cols, ok)
        tl.store(Stats + row * 8 + 2, m2)
        tl.store(Stats + row * 8 + 3, s2)
        tl.store(Stats + row * 8 + 4, m3)
        tl.store(Stats + row * 8 + 5, s3)
    l4 = n4 * _vec(G4, cols, ok) + _vec(B4, cols, ok)
    h_hat = _tanh(l3 + r * l4)
    h_prev = _vec(H_prev + r64 * stride_hp, cols, ok)
    h = (1.0 - z) * h_prev + z * h_hat
    tl.store(H_out + r64 * H + cols, h.to(H_out.dtype.element_ty), mask=ok)
    st = Stats + row * 8
    tl.store(st + 0, m1)
    tl.store(st + 1, s1)
    tl.store(st + 6, m4)
    tl.store(st + 7, s4)


@triton.jit
def _ln_dx1(dn, n, rstd, H):
    return (dn - tl.sum(dn, axis=0) / H - n * (tl.sum(dn * n, axis=0) / H)) * rstd


@triton.jit
def _ln_dx2(d0, d1, n0, n1, rstd, H):
    c1 = (tl.sum(d0, axis=0) + tl.sum(d1, axis=0)) / (2 * H)
    c2 = (tl.sum(d0 * n0, axis=0) + tl.sum(d1 * n1, axis=0)) / (2 * H)
    return (d0 - c1 - n0 * c2) * rstd, (d1 - c1 - n1 * c2) * rstd


@triton.jit
def _ln_gru_bwd(
    DH,  # (B, H) ∂L/∂h_t, contiguous
    ZRH,
    ZRX,
    WX,
    UH,
    H_prev,  # forward inputs, row strides as in the forward
    G1,
    B1,
    G2,
    B2,
    G3,
    B3,
    G4,
    B4,  # parameters as in the forward
    Stats,  # fp32 (B, 8) saved by the forward
    DZRH,
    DZRX,  # (B, 2H) outputs, row strides stride_dzrh / stride_dzrx
    DWX,
    DUH,  # (B, H) outputs, row strides stride_dwx / stride_duh
    DH_prev,  # (B, H) output, contiguous: the direct part dh ⊙ (1 − z) of ∂L/∂h_{t-1}
    Part,  # fp32 (B, 10H): row r = batch row r's parameter-gradient contributions
    stride_zrh,
    stride_zrx,
    stride_wx,
    stride_uh,
    stride_hp,
    stride_dzrh,
    stride_dzrx,
    stride_dwx,
    stride_duh,
    B,
    H,
    BLOCK_H: tl.constexpr,
    ACC: tl.constexpr,  # add to Part instead of overwriting it (a sequence's steps, launched in order)
    HOISTED: tl.constexpr,  # ZRX, WX are xg, xc; DZRX, DWX get ∂L/∂xg, ∂L/∂xc; Part is (B, 4H)
):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    for row in range(pid, B, n_prog):  # persistent over rows
        r64 = tl.cast(row, tl.int64)
        st = Stats + row * 8
        m1, s1 = tl.load(st + 0), tl.load(st + 1)
        m4, s4 = tl.load(st + 6), tl.load(st + 7)
        zrh = ZRH + r64 * stride_zrh
        zrx = ZRX + r64 * stride_zrx
        n1z, n1r = _renorm(zrh, cols, ok, m1, s1), _renorm(zrh + H, cols, ok, m1, s1)
        n4 = _renorm(UH + r64 * stride_uh, cols, ok, m4, s4)
        g4 = _vec(G4, cols, ok)
        l4 = n4 * g4 + _vec(B4, cols, ok)
        if HOISTED:
            z, r = _gates_hoisted(n1z, n1r, G1, zrx, cols, ok, H)
            h_hat = _tanh(_vec(WX + r64 * stride_wx, cols, ok) + r * l4)
        else:
            m2, s2 = tl.load(st + 2), tl.load(st + 3)
            m3, s3 = tl.load(st + 4), tl.load(st + 5)
            n2z, n2r = _renorm(zrx, cols, ok, m2, s2), _renorm(zrx + H, cols, ok, m2, s2)
            n3 = _renorm(WX + r64 * stride_wx, cols, ok, m3, s3)
            z, r = _gates(n1z, n1r, n2z, n2r, G1, B1, G2, B2, cols, ok, H)
            g3 = _vec(G3, cols, ok)
            h_hat = _tanh(n3 * g3 + _vec(B3, cols, ok) + r * l4)
        h_prev = _vec(H_prev + r64 * stride_hp, cols, ok)
        dh = _vec(DH + r64 * H, cols, ok)
        dp = dh * z * (1.0 - h_hat * h_hat)
        dl4 = dp * r
        da_z = dh * (h_hat - h_prev) * z * (1.0 - z)
        da_r = dp * l4 * r * (1.0 - r)
        tl.store(DH_prev + r64 * H + cols, (dh * (1.0 - z)).to(DH_prev.dtype.element_ty), mask=ok)
        ty = DWX.dtype.element_ty
        if HOISTED:  # [dγ₁ | dγ₄ | dβ₄]; dγ₂, dβ₁₂, dγ₃, dβ₃ and ∂L/∂ax from LN backwards after the loop
            tl.store(DWX + r64 * stride_dwx + cols, dp.to(ty), mask=ok)  # ∂L/∂xc
            tl.store(DZRX + r64 * stride_dzrx + cols, da_z.to(ty), mask=ok)  # ∂L/∂xg
            tl.store(DZRX + r64 * stride_dzrx + H + cols, da_r.to(ty), mask=ok)
            part = Part + r64 * (4 * H)
            _put(part + 2 * H, cols, ok, dl4 * n4, ACC)  # dγ₄
            _put(part + 3 * H, cols, ok, dl4, ACC)  # dβ₄
            _put(part, cols, ok, da_z * n1z, ACC)  # dγ₁ (z half)
            _put(part + H, cols, ok, da_r * n1r, ACC)  # dγ₁ (r half)
        else:
            part = Part + r64 * (10 * H)
            _put(part, cols, ok, da_z * n1z, ACC)  # dγ₁ (z half)
            _put(part + H, cols, ok, da_r * n1r, ACC)  # dγ₁ (r half)
            _put(part + 2 * H, cols, ok, da_z * n2z, ACC)  # dγ₂
            _put(part + 3 * H, cols, ok, da_r * n2r, ACC)
            _put(part + 4 * H, cols, ok, da_z, ACC)  # dβ₁ = dβ₂
            _put(part + 5 * H, cols, ok, da_r, ACC)
            _put(part + 6 * H, cols, ok, dp * n3, ACC)  # dγ₃
            _put(part + 7 * H, cols, ok, dp, ACC)  # dβ₃
            _put(part + 8 * H, cols, ok, dl4 * n4, ACC)  # dγ₄
            _put(part + 9 * H, cols, ok, dl4, ACC)  # dβ₄
            tl.store(DWX + r64 * stride_dwx + cols, _ln_dx1(dp * g3, n3, s3, H).to(ty), mask=ok)
            e0, e1 = _ln_dx2(da_z * _vec(G2, cols, ok), da_r * _vec(G2 + H, cols, ok), n2z, n2r, s2, H)
            tl.store(DZRX + r64 * stride_dzrx + cols, e0.to(ty), mask=ok)
            tl.store(DZRX + r64 * stride_dzrx + H + cols, e1.to(ty), mask=ok)
        tl.store(DUH + r64 * stride_duh + cols, _ln_dx1(dl4 * g4, n4, s4, H).to(ty), mask=ok)
        e0, e1 = _ln_dx2(da_z * _vec(G1, cols, ok), da_r * _vec(G1 + H, cols, ok), n1z, n1r, s1, H)
        tl.store(DZRH + r64 * stride_dzrh + cols, e0.to(ty), mask=ok)
        tl.store(DZRH + r64 * stride_dzrh + H + cols, e1.to(ty), mask=ok)
