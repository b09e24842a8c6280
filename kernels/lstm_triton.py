"""Triton kernels of the fused LN-LSTM cell (eq. 20): one launch per step forward, two backward.

Forward, per batch row (one program per row), with H the hidden size and gates in order (f, i, o, g):
    n_h = LN₀(hh) over 4H,  n_x = LN₀(xx) over 4H                 (LN₀: normalize only; fp32 stats)
    a   = n_h ⊙ γ_h + β_h + n_x ⊙ γ_x + β_x + b                   (4H summed inputs)
    f, i, o = σ(a_f), σ(a_i), σ(a_o);   g = tanh(a_g)
    c   = f ⊙ c_prev + i ⊙ g;   n_c = LN₀(c) over H;   ℓ = n_c ⊙ γ_c + β_c;   h = o ⊙ tanh(ℓ)
Saved per row: (μ_h, rstd_h, μ_x, rstd_x, μ_c, rstd_c) in fp32; backward recomputes the rest from
hh, xx, c_prev (cheaper than storing 4H gates).
Backward (dh, dc from the future), per row:
    dℓ = dh ⊙ o ⊙ (1 − tanh²ℓ),   do = dh ⊙ tanh ℓ,   dγ_c += dℓ ⊙ n_c,   dβ_c += dℓ
    dc_t = dc + rstd_c · (dn − mean(dn) − n_c ⊙ mean(dn ⊙ n_c)),  dn = dℓ ⊙ γ_c
    da_f = dc_t c_prev f(1−f),  da_i = dc_t g i(1−i),  da_o = do o(1−o),  da_g = dc_t i (1−g²)
    dc_prev = dc_t ⊙ f;  db = dβ_h = dβ_x += da;  dγ_h += da ⊙ n_h;  dγ_x += da ⊙ n_x
    dhh = rstd_h · (da γ_h − mean(da γ_h) − n_h ⊙ mean(da γ_h ⊙ n_h)) over 4H, dxx likewise.
Parameter gradients: per-row fp32 partials [B, 14H] = [dγ_h | dγ_x | db | dγ_c | dβ_c] (LSTM batches are
small and these stay in L2; carrying 14 accumulators across rows spilled registers at H = 1024), then the
fixed-order column sum of ln_triton.py: deterministic, no atomics. With ACC the backward adds to the
partials instead of overwriting them: a whole sequence (lstm_seq_op) launches its steps in order on one
stream into one [B, 14H] buffer and sums its columns once.
HOISTED (the sequence): the input side does not depend on h, so the caller computes
xn = LN(ax) γ_x + β_x + β_h + b for all T·B rows in one batched LayerNorm before the loop; the cell reads
xn_t in place of xx, keeps partials [B, 6H] = [dγ_h | dγ_c | dβ_c] only, and writes da (= ∂L/∂xn_t) where
dxx went; one LayerNorm backward over all T·B rows after the loop gives ∂L/∂ax, dγ_x and db.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _sigmoid(z):
    return 1.0 / (1.0 + tl.exp(-z))


@triton.jit
def _tanh(z):
    # tanh z = 2σ(2z) − 1: saturates cleanly to ±1 in fp32 and needs no libdevice.
    return 2.0 * _sigmoid(2.0 * z) - 1.0


@triton.jit
def _load4(ptr, cols, ok, H):
    """The four gate blocks (f, i, o, g) of a 4H vector, as fp32."""
    v0 = tl.load(ptr + cols, mask=ok, other=0.0).to(tl.float32)
    v1 = tl.load(ptr + H + cols, mask=ok, other=0.0).to(tl.float32)
    v2 = tl.load(ptr + 2 * H + cols, mask=ok, other=0.0).to(tl.float32)
    v3 = tl.load(ptr + 3 * H + cols, mask=ok, other=0.0).to(tl.float32)
    return v0, v1, v2, v3


@triton.jit
def _store4(ptr, cols, ok, H, v0, v1, v2, v3):
    ty = ptr.dtype.element_ty
    tl.store(ptr + cols, v0.to(ty), mask=ok)
    tl.store(ptr + H + cols, v1.to(ty), mask=ok)
    tl.store(ptr + 2 * H + cols, v2.to(ty), mask=ok)
    tl.store(ptr + 3 * H + cols, v3.to(ty), mask=ok)


@triton.jit
def _put(ptr, cols, ok, v, ACC: tl.constexpr):
    """Store v, or add it to what is there (ACC: a fp32 partial summed over launches in stream order)."""
    if ACC:
        v = v + tl.load(ptr + cols, mask=ok, other=0.0)
    tl.store(ptr + cols, v, mask=ok)


@triton.jit
def _put4(ptr, cols, ok, H, v0, v1, v2, v3, ACC: tl.constexpr):
    _put(ptr, cols, ok, v0, ACC)
    _put(ptr + H, cols, ok, v1, ACC)
    _put(ptr + 2 * H, cols, ok, v2, ACC)
    _put(ptr + 3 * H, cols, ok, v3, ACC)


@triton.jit
def _normalize4(ptr, cols, ok, H, eps):
    """x̂ blocks of one 4H row plus its fp32 μ and rstd (centred two-pass on the resident row)."""
    a0, a1, a2, a3 = _load4(ptr, cols, ok, H)
    mean = (tl.sum(a0, axis=0) + tl.sum(a1, axis=0) + tl.sum(a2, axis=0) + tl.sum(a3, axis=0)) / (4 * H)
    d0 = tl.where(ok, a0 - mean, 0.0)
    d1 = tl.where(ok, a1 - mean, 0.0)
    d2 = tl.where(ok, a2 - mean, 0.0)
    d3 = tl.where(ok, a3 - mean, 0.0)
    var = (
        tl.sum(d0 * d0, axis=0) + tl.sum(d1 * d1, axis=0) + tl.sum(d2 * d2, axis=0) + tl.sum(d3 * d3, axis=0)
    ) / (4 * H)
    rstd = 1.0 / tl.sqrt(var + eps)
    return d0 * rstd, d1 * rstd, d2 * rstd, d3 * rstd, mean, rstd


@triton.jit
def _renormalize4(ptr, cols, ok, H, mean, rstd):
    """x̂ blocks of one 4H row from its saved μ and rstd."""
    a0, a1, a2, a3 = _load4(ptr, cols, ok, H)
    return (
        tl.where(ok, (a0 - mean) * rstd, 0.0),
        tl.where(ok, (a1 - mean) * rstd, 0.0),
        tl.where(ok, (a2 - mean) * rstd, 0.0),
        tl.where(ok, (a3 - mean) * rstd, 0.0),
    )


@triton.jit
def _ln_dx4(d0, d1, d2, d3, n0, n1, n2, n3, rstd, H):
    """LayerNorm input gradient over 4H from dn = d (already times γ) and x̂ = n."""
    c1 = (tl.sum(d0, axis=0) + tl.sum(d1, axis=0) + tl.sum(d2, axis=0) + tl.sum(d3, axis=0)) / (4 * H)
    c2 = (
        tl.sum(d0 * n0, axis=0) + tl.sum(d1 * n1, axis=0) + tl.sum(d2 * n2, axis=0) + tl.sum(d3 * n3, axis=0)
    ) / (4 * H)
    return (
        (d0 - c1 - n0 * c2) * rstd,
        (d1 - c1 - n1 * c2) * rstd,
        (d2 - c1 - n2 * c2) * rstd,
        (d3 - c1 - n3 * c2) * rstd,
    )


@triton.jit
def _cell_forward(nh0, nh1, nh2, nh3, nx0, nx1, nx2, nx3, GH, BH, GX, BX, Bias, cols, ok, H):
    """Gate activations (f, i, o, g) from the normalized rows and the parameters."""
    gh0, gh1, gh2, gh3 = _load4(GH, cols, ok, H)
    gx0, gx1, gx2, gx3 = _load4(GX, cols, ok, H)
    bh0, bh1, bh2, bh3 = _load4(BH, cols, ok, H)
    bx0, bx1, bx2, bx3 = _load4(BX, cols, ok, H)
    b0, b1, b2, b3 = _load4(Bias, cols, ok, H)
    f = _sigmoid(nh0 * gh0 + nx0 * gx0 + (bh0 + bx0 + b0))
    i = _sigmoid(nh1 * gh1 + nx1 * gx1 + (bh1 + bx1 + b1))
    o = _sigmoid(nh2 * gh2 + nx2 * gx2 + (bh2 + bx2 + b2))
    g = _tanh(nh3 * gh3 + nx3 * gx3 + (bh3 + bx3 + b3))
    return f, i, o, g


@triton.jit
def _cell_forward_hoisted(nh0, nh1, nh2, nh3, GH, XN, cols, ok, H):
    """Gate activations (f, i, o, g) from LN₀(hh) and the hoisted input side xn = LN(xx)γ_x + β_x + β_h + b"""
    gh0, gh1, gh2, gh3 = _load4(GH, cols, ok, H)
    x0, x1, x2, x3 = _load4(XN, cols, ok, H)
    return (
        _sigmoid(nh0 * gh0 + x0),
        _sigmoid(nh1 * gh1 + x1),
        _sigmoid(nh2 * gh2 + x2),
        _tanh(nh3 * gh3 + x3),
    )


@triton.jit
def _ln_lstm_fwd(
    HH,  # (B, 4H) h_{t-1} W_hᵀ, row stride stride_hh, activation dtype
    XX,  # (B, 4H) x_t W_xᵀ, row stride stride_xx (HOISTED: xn_t = LN(x_t W_xᵀ) γ_x + β_x + β_h + b)
    C_prev,  # (B, H) previous cell state, row stride stride_cp
    GH,
    BH,  # (4H,) gain / bias of LN(hh), any float dtype
    GX,
    BX,  # (4H,) gain / bias of LN(xx)
    Bias,  # (4H,) the gate bias b
    GC,
    BC,  # (H,) gain / bias of LN(c)
    H_out,  # (B, H) output h_t, contiguous, activation dtype
    C_out,  # (B, H) output c_t, contiguous
    Stats,  # fp32 (B, 6): μ_h, rstd_h, μ_x, rstd_x, μ_c, rstd_c per row (HOISTED: μ_x, rstd_x not written)
    stride_hh,
    stride_xx,
    stride_cp,
    H,
    eps,
    BLOCK_H: tl.constexpr,
    HOISTED: tl.constexpr,  # XX holds the hoisted input side (only GH, GC, BC of the parameters are read)
):
    row = tl.program_id(0)
    r64 = tl.cast(row, tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    nh0, nh1, nh2, nh3, mean_h, rstd_h = _normalize4(HH + r64 * stride_hh, cols, ok, H, eps)
    if HOISTED:
        f, i, o, g = _cell_forward_hoisted(nh0, nh1, nh2, nh3, GH, XX + r64 * stride_xx, cols, ok, H)
    else:
        nx0, nx1, nx2, nx3, mean_x, rstd_x = _normalize4(XX + r64 * stride_xx, cols, ok, H, eps)
        f, i, o, g = _cell_forward(nh0, nh1, nh2, nh3, nx0, nx1, nx2, nx3, GH, BH, GX, BX, Bias, cols, ok, H)
        tl.store(Stats + row * 6 + 2, mean_x)
        tl.store(Stats + row * 6 + 3, rstd_x)
    c_prev = tl.load(C_prev + r64 * stride_cp + cols, mask=ok, other=0.0).to(tl.float32)
    c = tl.where(ok, f * c_prev + i * g, 0.0)
    mean_c = tl.sum(c, axis=0) / H
    dc = tl.where(ok, c - mean_c, 0.0)
    rstd_c = 1.0 / tl.sqrt(tl.sum(dc * dc, axis=0) / H + eps)
    gc = tl.load(GC + cols, mask=ok, other=0.0).to(tl.float32)
    bc = tl.load(BC + cols, mask=ok, other=0.0).to(tl.float32)
    h = o * _tanh(dc * rstd_c * gc + bc)
    tl.store(H_out + r64 * H + cols, h.to(H_out.dtype.element_ty), mask=ok)
    tl.store(C_out + r64 * H + cols, c.to(C_out.dtype.element_ty), mask=ok)
    tl.store(Stats + row * 6 + 0, mean_h)
    tl.store(Stats + row * 6 + 1, rstd_h)
    tl.store(Stats + row * 6 + 4, mean_c)
    tl.store(Stats + row * 6 + 5, rstd_c)


@triton.jit
def _ln_lstm_bwd(
    DH,  # (B, H) ∂L/∂h_t, contiguous
    DC,  # (B, H) ∂L/∂c_t from the next step (zeros when unused), contiguous
    HH,
    XX,  # (B, 4H) forward inputs, row strides stride_hh / stride_xx
    C_prev,  # (B, H) forward input, row stride stride_cp
    GH,
    BH,
    GX,
    BX,
    Bias,
    GC,
    BC,  # parameters as in the forward
    Stats,  # fp32 (B, 6) saved by the forward
    DHH,
    DXX,  # (B, 4H) outputs, contiguous, activation dtype (HOISTED: ∂L/∂xn = the gates' da)
    DC_prev,  # (B, H) output ∂L/∂c_{t-1}, contiguous
    # fp32 (B, 14H): row r = batch row r's [dγ_h | dγ_x | db | dγ_c | dβ_c]; HOISTED: (B, 6H) of
    # [dγ_h | dγ_c | dβ_c]
    Part,
    stride_hh,
    stride_xx,
    stride_cp,
    B,
    H,
    BLOCK_H: tl.constexpr,
    ACC: tl.constexpr,  # add to Part instead of overwriting it (a sequence's steps, launched in order)
    HOISTED: tl.constexpr,  # XX is the hoisted input side xn; its LN backward runs after the loop
):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    gc = tl.load(GC + cols, mask=ok, other=0.0).to(tl.float32)
    bc = tl.load(BC + cols, mask=ok, other=0.0).to(tl.float32)
    for row in range(pid, B, n_prog):  # persistent over rows
        r64 = tl.cast(row, tl.int64)
        mean_h = tl.load(Stats + row * 6 + 0)
        rstd_h = tl.load(Stats + row * 6 + 1)
        mean_c = tl.load(Stats + row * 6 + 4)
        rstd_c = tl.load(Stats + row * 6 + 5)
        nh0, nh1, nh2, nh3 = _renormalize4(HH + r64 * stride_hh, cols, ok, H, mean_h, rstd_h)
        if HOISTED:
            f, i, o, g = _cell_forward_hoisted(nh0, nh1, nh2, nh3, GH, XX + r64 * stride_xx, cols, ok, H)
            part = Part + r64 * (6 * H)
            part_c = part + 4 * H  # dγ_c, dβ_c
        else:
            mean_x = tl.load(Stats + row * 6 + 2)
            rstd_x = tl.load(Stats + row * 6 + 3)
            nx0, nx1, nx2, nx3 = _renormalize4(XX + r64 * stride_xx, cols, ok, H, mean_x, rstd_x)
            f, i, o, g = _cell_forward(
                nh0, nh1, nh2, nh3, nx0, nx1, nx2, nx3, GH, BH, GX, BX, Bias, cols, ok, H
            )
            part = Part + r64 * (14 * H)
            part_c = part + 12 * H
        c_prev = tl.load(C_prev + r64 * stride_cp + cols, mask=ok, other=0.0).to(tl.float32)
        nc = tl.where(ok, (f * c_prev + i * g - mean_c) * rstd_c, 0.0)
        th = _tanh(nc * gc + bc)
        dh = tl.load(DH + r64 * H + cols, mask=ok, other=0.0).to(tl.float32)
        dc_next = tl.load(DC + r64 * H + cols, mask=ok, other=0.0).to(tl.float32)
        dl = dh * o * (1.0 - th * th)
        _put(part_c, cols, ok, dl * nc, ACC)  # dγ_c
        _put(part_c + H, cols, ok, dl, ACC)  # dβ_c
        dn = dl * gc
        m1 = tl.sum(dn, axis=0) / H
        m2 = tl.sum(dn * nc, axis=0) / H
        dct = tl.where(ok, dc_next + rstd_c * (dn - m1 - nc * m2), 0.0)
        tl.store(DC_prev + r64 * H + cols, (dct * f).to(DC_prev.dtype.element_ty), mask=ok)
        da0 = dct * c_prev * f * (1.0 - f)
        da1 = dct * g * i * (1.0 - i)
        da2 = dh * th * o * (1.0 - o)
        da3 = dct * i * (1.0 - g * g)
        _put4(part, cols, ok, H, da0 * nh0, da1 * nh1, da2 * nh2, da3 * nh3, ACC)  # dγ_h
        if not HOISTED:
            _put4(part + 4 * H, cols, ok, H, da0 * nx0, da1 * nx1, da2 * nx2, da3 * nx3, ACC)  # dγ_x
            _put4(part + 8 * H, cols, ok, H, da0, da1, da2, da3, ACC)  # db = dβ_h = dβ_x
        gh0, gh1, gh2, gh3 = _load4(GH, cols, ok, H)
        e0, e1, e2, e3 = _ln_dx4(da0 * gh0, da1 * gh1, da2 * gh2, da3 * gh3, nh0, nh1, nh2, nh3, rstd_h, H)
        _store4(DHH + r64 * (4 * H), cols, ok, H, e0, e1, e2, e3)
        if HOISTED:  # ∂L/∂xn: dγ_x, db (= dβ_h = dβ_x) and ∂L/∂ax come from one LN backward after the loop
            _store4(DXX + r64 * (4 * H), cols, ok, H, da0, da1, da2, da3)
        else:
            gx0, gx1, gx2, gx3 = _load4(GX, cols, ok, H)
            e0, e1, e2, e3 = _ln_dx4(
                da0 * gx0, da1 * gx1, da2 * gx2, da3 * gx3, nx0, nx1, nx2, nx3, rstd_x, H
            )
            _store4(DXX + r64 * (4 * H), cols, ok, H, e0, e1, e2, e3)
