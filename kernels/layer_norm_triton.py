"""The Triton LayerNorm kernels (launches, autograd and dispatch: layer_norm_op.py).

Maths (the paper's eq. 15, population variance), per row x of length N, statistics in fp32:
    μ = Σ x / N,   σ² = Σ (x − μ)² / N,   rstd = 1 / √(σ² + ε),   x̂ = (x − μ)·rstd,   y = γ ⊙ x̂ + β
Backward, with g = γ ⊙ ∂y (g = ∂y without a gain):
    ∂x = rstd · (g − x̂ · mean(g ⊙ x̂) − mean(g)),   ∂γ = Σ_rows ∂y ⊙ x̂,   ∂β = Σ_rows ∂y
Two shapes of row:
  * resident (next_pow2(N) ≤ MAX_RESIDENT): the row stays in registers; the forward takes ROWS rows per
    program when rows are short; the backward is persistent: P programs each walk a contiguous range of
    rows, keep their partial ∂γ, ∂β in registers and write one fp32 partial row each; torch sums the P
    partial rows in a fixed order, so ∂γ, ∂β are bitwise repeatable for a given (M, N, device).
  * long rows: the forward walks each row in chunks (mean, then centred variance, then y; the row is in
    L2 by the second walk); the backward first reduces mean(g ⊙ x̂) and mean(g) per row (`_ln_bwd_rowsums`),
    then splits the columns into segments so each program still holds its partial ∂γ, ∂β in registers.
P is computed per call from (M, N, device) — never cached across shapes — so a worker's results and its
launches do not depend on the shapes it saw before.
"""

import triton
import triton.language as tl


@triton.jit
def _ln_fwd(
    X,  # input rows (M, N), last dim contiguous, row stride stride_x; fp32/fp16/bf16
    Y,  # output rows (M, N), row stride N, X's dtype
    W,  # gain γ (N,), any float dtype; unused when HAS_W is False
    B,  # bias β (N,); unused when HAS_B is False
    Mean,  # fp32 (M,): μ per row, for the backward
    Rstd,  # fp32 (M,): 1/√(σ²+ε) per row, for the backward
    stride_x,
    M,
    N,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    LONG: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    if LONG:  # one row per program, walked in BLOCK_N chunks
        row = tl.program_id(0).to(tl.int64)
        x_row = X + row * stride_x
        y_row = Y + row * N
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            acc += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / N
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for off in range(0, N, BLOCK_N):  # centred second pass: no cancellation in σ²
            cols = off + tl.arange(0, BLOCK_N)
            x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            xc = tl.where(cols < N, x - mean, 0.0)
            acc += xc * xc
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for off in range(0, N, BLOCK_N):
            cols = off + tl.arange(0, BLOCK_N)
            ok = cols < N
            y = (tl.load(x_row + cols, mask=ok, other=0.0).to(tl.float32) - mean) * rstd
            if HAS_W:
                y = y * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
            tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=ok)
        tl.store(Mean + row, mean)
        tl.store(Rstd + row, rstd)
    else:  # ROWS whole rows per program, resident in registers
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK_N)
        row_ok = rows < M
        mask = row_ok[:, None] & (cols < N)[None, :]
        rows64 = rows.to(tl.int64)  # M·N can pass 2³¹
        x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / N
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / N + eps)
        y = xc * rstd[:, None]
        if HAS_W:
            y = y * tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        if HAS_B:
            y = y + tl.load(B + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        tl.store(Y + rows64[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
        tl.store(Mean + rows, mean, mask=row_ok)
        tl.store(Rstd + rows, rstd, mask=row_ok)


@triton.jit
def _ln_bwd_rowsums(
    DY,  # ∂y rows (M, N), row stride stride_dy
    X,  # x rows (M, N), row stride stride_x
    W,  # γ (N,); unused when HAS_W is False
    Mean,  # fp32 (M,)
    Rstd,  # fp32 (M,)
    C,  # fp32 (M, 2) out: (mean(g ⊙ x̂), mean(g)) per row
    stride_dy,
    stride_x,
    N,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    acc_gx = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc_g = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        ok = cols < N
        x = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
        g = tl.load(DY + row * stride_dy + cols, mask=ok, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        acc_gx += g * tl.where(ok, (x - mean) * rstd, 0.0)
        acc_g += g
    tl.store(C + 2 * row, tl.sum(acc_gx, axis=0) / N)
    tl.store(C + 2 * row + 1, tl.sum(acc_g, axis=0) / N)


@triton.jit
def _ln_bwd(
    DY,  # ∂y rows (M, N), row stride stride_dy
    X,  # x rows (M, N), row stride stride_x
    W,  # γ (N,); unused when HAS_W is False
    Mean,  # fp32 (M,)
    Rstd,  # fp32 (M,)
    C,  # fp32 (M, 2) from _ln_bwd_rowsums; read only when SEGMENTED
    DX,  # ∂x rows (M, N) out, row stride N, X's dtype
    DW,  # fp32 (P, N) out: this program's partial Σ ∂y ⊙ x̂; unused when HAS_W is False
    DB,  # fp32 (P, N) out: this program's partial Σ ∂y; unused when HAS_B is False
    stride_dy,
    stride_x,
    M,
    N,
    rows_per_program,
    BLOCK_N: tl.constexpr,
    SEGMENTED: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # this program's column segment
    ok = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    acc_dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc_db = tl.zeros([BLOCK_N], dtype=tl.float32)
    first = pid * rows_per_program
    for i in range(first, tl.minimum(first + rows_per_program, M)):
        row = tl.cast(i, tl.int64)
        x = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * stride_dy + cols, mask=ok, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + row)
        xhat = tl.where(ok, (x - tl.load(Mean + row)) * rstd, 0.0)
        if HAS_W:
            g = dy * w
        else:
            g = dy
        if SEGMENTED:
            c_gx = tl.load(C + 2 * row)
            c_g = tl.load(C + 2 * row + 1)
        else:
            c_gx = tl.sum(g * xhat, axis=0) / N
            c_g = tl.sum(g, axis=0) / N
        dx = (g - (xhat * c_gx + c_g)) * rstd
        tl.store(DX + row * N + cols, dx.to(DX.dtype.element_ty), mask=ok)
        acc_dw += dy * xhat
        acc_db += dy
    if HAS_W:
        tl.store(DW + pid * N + cols, acc_dw, mask=ok)
    if HAS_B:
        tl.store(DB + pid * N + cols, acc_db, mask=ok)
