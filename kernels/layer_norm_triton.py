"""The Triton LayerNorm kernels (launches and plans: layer_norm_op.py; autograd: layer_norm_autograd.py).

Maths (the paper's eq. 15, population variance), per row x of length N, statistics in fp32:
    μ = Σ x / N,   σ² = Σ (x − μ)² / N,   rstd = 1 / √(σ² + ε),   x̂ = (x − μ)·rstd,   y = γ ⊙ x̂ + β
Backward, with g = γ ⊙ ∂y (g = ∂y without a gain):
    ∂x = rstd · (g − x̂ · mean(g ⊙ x̂) − mean(g)),   ∂γ = Σ_rows ∂y ⊙ x̂,   ∂β = Σ_rows ∂y
Forward: a persistent grid; each program loads γ and β once, then walks blocks of ROWS rows, issuing the
next block's loads before the current block's reductions (memory never idles between phases). A
resident row is held as two power-of-two tiles, BLOCK_A = the largest power of two ≤ N and BLOCK_B ≥ the
rest (N = 4099: 4096 + 4 lanes, not 8192); rows too long to hold are walked in chunks, each walk a
`tl.range` with `num_stages` (Triton pipelines a loop without `tl.dot` only then).
Backward: persistent: P programs each walk a contiguous range of rows, ROWS rows per step for short rows
(2-D ∂γ/∂β accumulators, reduced once at the end), mean(g ⊙ x̂) and mean(g) in one fused reduction,
and write one fp32 partial row each; `_ln_param_sums` adds the P partial rows in a fixed order, so ∂γ, ∂β
are bitwise repeatable for a given (M, N, device). Long rows first reduce mean(g ⊙ x̂), mean(g) per row
(`_ln_bwd_rowsums`), then split the columns into segments, each program holding its partial ∂γ, ∂β.
"""

import triton
import triton.language as tl


@triton.jit
def _add_pair(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


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
    BLOCK_A: tl.constexpr,  # resident: the first tile (power of two ≤ N); long: the chunk
    BLOCK_B: tl.constexpr,  # resident: the second tile (≥ N − BLOCK_A; 0: none)
    ROWS: tl.constexpr,
    LONG: tl.constexpr,
    STAGES: tl.constexpr,
    PREFETCH: tl.constexpr,  # resident: γ/β held, the next block loaded before this one is reduced
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    if LONG:  # one row at a time, walked in BLOCK_A chunks; rows strided over the persistent grid
        for r in range(pid, M, programs):
            row = tl.cast(r, tl.int64)
            x_row = X + row * stride_x
            y_row = Y + row * N
            acc = tl.zeros([BLOCK_A], dtype=tl.float32)
            for off in tl.range(0, N, BLOCK_A, num_stages=STAGES):
                cols = off + tl.arange(0, BLOCK_A)
                acc += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
            mean = tl.sum(acc, axis=0) / N
            acc = tl.zeros([BLOCK_A], dtype=tl.float32)
            for off in tl.range(0, N, BLOCK_A, num_stages=STAGES):  # centred: no cancellation in σ²
                cols = off + tl.arange(0, BLOCK_A)
                x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
                xc = tl.where(cols < N, x - mean, 0.0)
                acc += xc * xc
            rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
            for off in tl.range(0, N, BLOCK_A, num_stages=STAGES):
                cols = off + tl.arange(0, BLOCK_A)
                ok = cols < N
                y = (tl.load(x_row + cols, mask=ok, other=0.0).to(tl.float32) - mean) * rstd
                if HAS_W:
                    y = y * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
                if HAS_B:
                    y = y + tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
                tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=ok)
            tl.store(Mean + row, mean)
            tl.store(Rstd + row, rstd)
    else:  # ROWS whole rows per step, resident in registers as tile A (+ tile B)
        cols_a = tl.arange(0, BLOCK_A)  # all < N: BLOCK_A ≤ N
        cols_b = BLOCK_A + tl.arange(0, BLOCK_B if BLOCK_B > 0 else 1)
        ok_b = cols_b < N
        if PREFETCH:  # γ, β once per program (a 16K–32K row reloads them from cache: registers)
            if HAS_W:
                w_a = tl.load(W + cols_a).to(tl.float32)[None, :]
                w_b = tl.load(W + cols_b, mask=ok_b, other=0.0).to(tl.float32)[None, :]
            if HAS_B:
                b_a = tl.load(B + cols_a).to(tl.float32)[None, :]
                b_b = tl.load(B + cols_b, mask=ok_b, other=0.0).to(tl.float32)[None, :]
        blocks = tl.cdiv(M, ROWS)
        rows = pid * ROWS + tl.arange(0, ROWS)
        row_ok = rows < M
        rows64 = rows.to(tl.int64)  # M·N can pass 2³¹
        x_a = tl.load(X + rows64[:, None] * stride_x + cols_a[None, :], mask=row_ok[:, None], other=0.0)
        x_b = tl.load(X + rows64[:, None] * stride_x + cols_b[None, :], mask=row_ok[:, None] & ok_b[None, :],
                      other=0.0)  # fmt: skip
        for blk in range(pid, blocks, programs):
            nxt = (blk + programs) * ROWS + tl.arange(0, ROWS)
            nxt_ok = nxt < M
            nxt64 = nxt.to(tl.int64)
            x_next = X + nxt64[:, None] * stride_x
            if PREFETCH:  # the next block's loads go out before this block's reductions
                xn_a = tl.load(x_next + cols_a[None, :], mask=nxt_ok[:, None], other=0.0)
                xn_b = tl.load(x_next + cols_b[None, :], mask=nxt_ok[:, None] & ok_b[None, :], other=0.0)
            xa = x_a.to(tl.float32)
            xb = x_b.to(tl.float32)
            mean = (tl.sum(xa, axis=1) + tl.sum(xb, axis=1)) / N
            xca = xa - mean[:, None]
            xcb = tl.where(ok_b[None, :], xb - mean[:, None], 0.0)
            rstd = 1.0 / tl.sqrt((tl.sum(xca * xca, axis=1) + tl.sum(xcb * xcb, axis=1)) / N + eps)
            ya = xca * rstd[:, None]
            yb = xcb * rstd[:, None]
            if not PREFETCH:
                if HAS_W:
                    w_a = tl.load(W + cols_a).to(tl.float32)[None, :]
                    w_b = tl.load(W + cols_b, mask=ok_b, other=0.0).to(tl.float32)[None, :]
                if HAS_B:
                    b_a = tl.load(B + cols_a).to(tl.float32)[None, :]
                    b_b = tl.load(B + cols_b, mask=ok_b, other=0.0).to(tl.float32)[None, :]
            if HAS_W:
                ya = ya * w_a
                yb = yb * w_b
            if HAS_B:
                ya = ya + b_a
                yb = yb + b_b
            y_rows = Y + rows64[:, None] * N
            tl.store(y_rows + cols_a[None, :], ya.to(Y.dtype.element_ty), mask=row_ok[:, None])
            if BLOCK_B > 0:
                mask_b = row_ok[:, None] & ok_b[None, :]
                tl.store(y_rows + cols_b[None, :], yb.to(Y.dtype.element_ty), mask=mask_b)
            tl.store(Mean + rows, mean, mask=row_ok)
            tl.store(Rstd + rows, rstd, mask=row_ok)
            if not PREFETCH:  # a whole 16K–32K row: its registers leave no room for the next one
                xn_a = tl.load(x_next + cols_a[None, :], mask=nxt_ok[:, None], other=0.0)
                xn_b = tl.load(x_next + cols_b[None, :], mask=nxt_ok[:, None] & ok_b[None, :], other=0.0)
            rows, row_ok, rows64, x_a, x_b = nxt, nxt_ok, nxt64, xn_a, xn_b


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
    for off in tl.range(0, N, BLOCK_N, num_stages=3):
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
    ROWS: tl.constexpr,  # rows per step (short rows: a [ROWS, BLOCK_N] tile)
    SEGMENTED: tl.constexpr,
    STAGES: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # this program's column segment
    ok = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)[None, :]
    acc_dw = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    acc_db = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, M)
    for start in tl.range(first, last, ROWS, num_stages=STAGES):  # the next rows load during this step
        rows = start + tl.arange(0, ROWS)
        row_ok = rows < last
        rows64 = rows.to(tl.int64)
        mask = row_ok[:, None] & ok[None, :]
        x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows64[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
        mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        if HAS_W:
            g = dy * w
        else:
            g = dy
        if SEGMENTED:
            c_gx = tl.load(C + 2 * rows64, mask=row_ok, other=0.0)
            c_g = tl.load(C + 2 * rows64 + 1, mask=row_ok, other=0.0)
        else:  # both row means in one reduction
            s_gx, s_g = tl.reduce((g * xhat, g), 1, _add_pair)
            c_gx = s_gx / N
            c_g = s_g / N
        dx = (g - (xhat * c_gx[:, None] + c_g[:, None])) * rstd[:, None]
        tl.store(DX + rows64[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        acc_dw += dy * xhat
        acc_db += dy
    if HAS_W:
        tl.store(DW + pid * N + cols, tl.sum(acc_dw, axis=0), mask=ok)
    if HAS_B:
        tl.store(DB + pid * N + cols, tl.sum(acc_db, axis=0), mask=ok)


@triton.jit
def _ln_param_sums(
    Part,  # fp32 (K, P, N): the backward's partial rows, ∂γ's first (when HAS_W), ∂β's last (when HAS_B)
    DW,  # ∂γ (N,) out, γ's dtype; unused when HAS_W is False
    DB,  # ∂β (N,) out, β's dtype; unused when HAS_B is False
    P,
    N,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    # Σ over the P partial rows in a fixed order (the same tiles, the same tree, every run): deterministic
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < N
    if HAS_W:
        acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
        for p0 in range(0, P, BLOCK_P):
            rows = p0 + tl.arange(0, BLOCK_P)
            m = (rows < P)[:, None] & ok[None, :]
            acc += tl.load(Part + rows[:, None].to(tl.int64) * N + cols[None, :], mask=m, other=0.0)
        tl.store(DW + cols, tl.sum(acc, axis=0).to(DW.dtype.element_ty), mask=ok)
    if HAS_B:
        base = Part + (P * N if HAS_W else 0)
        acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
        for p0 in range(0, P, BLOCK_P):
            rows = p0 + tl.arange(0, BLOCK_P)
            m = (rows < P)[:, None] & ok[None, :]
            acc += tl.load(base + rows[:, None].to(tl.int64) * N + cols[None, :], mask=m, other=0.0)
        tl.store(DB + cols, tl.sum(acc, axis=0).to(DB.dtype.element_ty), mask=ok)
