"""Triton LayerNorm kernels: forward (y, fp32 mean, fp32 rstd) and a fused, deterministic backward.

Maths (the paper's eq. 15, population variance), per row x of length N:
    μ = Σ x / N,   σ² = Σ (x − μ)² / N,   rstd = 1 / √(σ² + ε),   x̂ = (x − μ)·rstd,   y = γ ⊙ x̂ + β
Backward, with g = γ ⊙ dy:
    dx = rstd · (g − x̂ · mean(g ⊙ x̂) − mean(g)),   dγ = Σ_rows dy ⊙ x̂,   dβ = Σ_rows dy
All statistics accumulate in fp32 whatever the activation dtype; fp32 weights may meet fp16/bf16
activations. Tiers by N:
  * resident (BLOCK_N = next_pow2(N) ≤ MAX_RESIDENT; MAX_RESIDENT_BWD in the backward): the whole row
    stays in registers, the variance is the centred two-pass on the resident row; for small N each
    program takes ROWS rows at once.
  * shifted (resident sizes, N ≥ MIN_SHIFTED not a multiple of 16): rows read as an unaligned head, a
    16-byte-aligned body and a tail, so odd N keeps 16-byte loads and stores (the resident kernels,
    compiled for such N, load element by element: the PTX shows it). Forward one row per program;
    backward persistent like the resident tier, its grid a multiple of 8 so a program's rows share one
    alignment.
  * looped (larger N): one row per program walked in chunks; the statistics merge chunk by chunk with
    Chan's parallel formula (stable), then a second walk normalizes (the row is then mostly in L2).
The backward is a persistent grid of P programs: each owns rows pid, pid+P, … and keeps its own fp32
dγ/dβ partial (registers in the resident tier, its own row of the [P, N] slab in the looped tier);
dγ and dβ partials share one fp32 (2, P, N) buffer, and one launch of `_column_sum` (a 2-D grid of
narrow column strips × the two slabs) sums the P partials column by column in a fixed order. No atomics,
no locks, no zero fill (each program's first write to its partial row does not read it): the result is
bitwise identical on repeats for a given device and shape, whatever the buffer held before.
Masked tails (cols < N) keep every N correct; the looped tier still loads element by element where N is
not a multiple of 16.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Largest power-of-two row kept in registers: ptxas -v (python -m kernels.aot) shows spills above these
# (forward at 32768 with 32 warps; backward, which holds x, dy, γ and two partial rows, at 16384).
MAX_RESIDENT = 16384
MAX_RESIDENT_BWD = 8192
LOOP_BLOCK = 4096  # chunk of the looped tier
SMALL_ROW_ELEMS = 4096  # a resident program handles about this many elements (ROWS rows × BLOCK_N)
MIN_SHIFTED = 512  # forward rows at least this long whose N is not a multiple of 16 take _ln_fwd_shifted
# Software pipelining of the loops in the persistent kernels (the backward tiers, the column sum): the next
# row's (or chunk's, or tile's) loads go to shared memory by cp.async while this one is worked on. The H200
# profile showed the resident backward at ≈ 50 % of peak with one 32-warp program per SM: nothing was in
# flight during each row's reductions and stores. ptxas -v (sm_90) with 16-byte loads (N a multiple of
# 16): no spills, 33-82 KB of shared memory; with scalar loads (other N) 80-100 bytes of spills, so the
# backward launches those with STAGES=1 (layer_norm_op._bwd_launch). The forward's looped tier runs many
# programs per SM and is left unpipelined.
STAGES = tl.constexpr(2)  # the backward's depth where N % 16 == 0
SUM_STAGES = tl.constexpr(2)  # the column sum's (no spills either way)


@triton.jit
def _ln_fwd_resident(
    X,  # input rows (M, N), last dim contiguous, row stride stride_x; fp32/fp16/bf16
    Y,  # output rows (M, N), row stride stride_y, same dtype as X
    W,  # gain γ (N,), any float dtype (read as fp32); unused when HAS_W is False
    B,  # bias β (N,); unused when HAS_B is False
    Mean,  # fp32 (M,): μ per row, saved for backward
    Rstd,  # fp32 (M,): 1/√(σ²+ε) per row, saved for backward
    stride_x,
    stride_y,
    M,
    N,
    eps,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    rows64 = rows.to(tl.int64)  # M·N can pass 2³¹
    x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)  # centred two-pass on the resident row: stable
    var = tl.sum(xc * xc, axis=1) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    y = xc * rstd[:, None]
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        y = y * w[None, :]
    if HAS_B:
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
        y = y + b[None, :]
    tl.store(Y + rows64[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + rows, mean, mask=row_ok)
    tl.store(Rstd + rows, rstd, mask=row_ok)


@triton.jit
def _split(first, N, VEC: tl.constexpr):
    """(head, body, tail) of a row starting at element offset `first` of a 16-byte-aligned base: head < VEC
    elements up to the first 16-byte boundary, a body of whole 16-byte vectors (the compiler is told so),
    the rest in tail. N ≥ VEC, so the body starts on the boundary."""
    head = tl.minimum((VEC - first % VEC) % VEC, N).to(tl.int32)
    body = tl.multiple_of(((N - head) // VEC) * VEC, VEC)
    return head, body, N - head - body


@triton.jit
def _load3(ptr, start, at, body, cols, ends, b_ok, h_ok, t_ok):
    """The head (from `start`), body (from `at`) and tail (from `at + body`) of one row, as fp32. The body
    moves in 16-byte vectors when the caller has told the compiler that `at` is on a boundary."""
    return (
        tl.load(ptr + start + ends, mask=h_ok, other=0.0).to(tl.float32),
        tl.load(ptr + at + cols, mask=b_ok, other=0.0).to(tl.float32),
        tl.load(ptr + at + body + ends, mask=t_ok, other=0.0).to(tl.float32),
    )


@triton.jit
def _store3(ptr, start, at, body, cols, ends, b_ok, h_ok, t_ok, vh, vb, vt):
    """Stores head, body and tail values of one row (positions as in _load3), in ptr's dtype."""
    ty = ptr.dtype.element_ty
    tl.store(ptr + start + ends, vh.to(ty), mask=h_ok)
    tl.store(ptr + at + cols, vb.to(ty), mask=b_ok)
    tl.store(ptr + at + body + ends, vt.to(ty), mask=t_ok)


@triton.jit
def _ln_fwd_shifted(
    X,  # input rows (M, N), row stride stride_x, 16-byte aligned
    Y,  # output rows, the same row stride (stride_y == stride_x) and 16-byte aligned
    W,  # gain γ (N,) or unused
    B,  # bias β (N,) or unused
    Mean,  # fp32 (M,) μ
    Rstd,  # fp32 (M,) rstd
    stride_x,
    stride_y,
    M,
    N,
    eps,
    BLOCK_N: tl.constexpr,  # ≥ N
    VEC: tl.constexpr,  # elements in 16 bytes (8 for fp16/bf16, 4 for fp32)
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    # One row per program, for N not a multiple of 16, where Triton can prove neither the rows' 16-byte
    # alignment nor that the `cols < N` mask is constant over a vector, and so loads element by element.
    # Each row is read in three parts: an unaligned head (< VEC elements), a 16-byte-aligned body whose
    # length is a multiple of VEC (both facts given to the compiler by tl.multiple_of, so the body moves in
    # 16-byte vectors), and a tail (< VEC). X and Y share the row stride and alignment (the launcher
    # checks), so one split serves both. Same maths as _ln_fwd_resident (centred two-pass).
    row = tl.program_id(0)
    start = tl.cast(row, tl.int64) * stride_x  # the row's first element, in X and in Y
    head, body, tail = _split(start, N, VEC)
    cols = tl.arange(0, BLOCK_N)
    ends = tl.arange(0, VEC)
    b_ok = cols < body
    h_ok = ends < head
    t_ok = ends < tail
    at = tl.multiple_of(start + head, VEC)  # the body's first element: on a 16-byte boundary
    xh, xb, xt = _load3(X, start, at, body, cols, ends, b_ok, h_ok, t_ok)
    mean = (tl.sum(xb, axis=0) + tl.sum(xh, axis=0) + tl.sum(xt, axis=0)) / N
    cb = tl.where(b_ok, xb - mean, 0.0)
    ch = tl.where(h_ok, xh - mean, 0.0)
    ct = tl.where(t_ok, xt - mean, 0.0)
    var = (tl.sum(cb * cb, axis=0) + tl.sum(ch * ch, axis=0) + tl.sum(ct * ct, axis=0)) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    yh = ch * rstd
    yb = cb * rstd
    yt = ct * rstd
    if HAS_W:  # γ's column of body element k is head + k: these loads stay element-wise (from cache)
        wh, wb, wt = _load3(W, 0, head, body, cols, ends, b_ok, h_ok, t_ok)
        yh, yb, yt = yh * wh, yb * wb, yt * wt
    if HAS_B:
        bh, bb, bt = _load3(B, 0, head, body, cols, ends, b_ok, h_ok, t_ok)
        yh, yb, yt = yh + bh, yb + bb, yt + bt
    _store3(Y, start, at, body, cols, ends, b_ok, h_ok, t_ok, yh, yb, yt)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@triton.jit
def _ln_fwd_looped(
    X,  # input rows (M, N), row stride stride_x
    Y,  # output rows (M, N), row stride stride_y
    W,  # gain γ (N,) or unused
    B,  # bias β (N,) or unused
    Mean,  # fp32 (M,) μ
    Rstd,  # fp32 (M,) rstd
    stride_x,
    stride_y,
    M,
    N,
    eps,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    # Persistent: program pid takes rows pid, pid + P, … (P = the grid: one wave of co-resident programs on
    # a GPU), so only P long rows are in flight and the second pass finds its row in L2. The first pass's
    # loads ask L2 to keep the row (evict_last); the second pass's loads and the stores of y stream
    # (evict_first). The H200 profile showed the one-program-per-row grid (≈ 1000 rows in flight) missing
    # L2 on the second read at N ≥ 32768.
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    for row in range(pid, M, n_prog):
        x_row = X + tl.cast(row, tl.int64) * stride_x
        y_row = Y + tl.cast(row, tl.int64) * stride_y
        # Pass 1: Chan's merge of per-chunk (count, mean, M2): stable without a third read.
        n_a = 0.0
        mean_a = 0.0
        m2_a = 0.0
        for off in range(0, N, BLOCK_N):
            ok = off + cols < N
            x = tl.load(x_row + off + cols, mask=ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
            n_b = tl.minimum(N - off, BLOCK_N).to(tl.float32)
            mean_b = tl.sum(x, axis=0) / n_b
            xc = tl.where(ok, x - mean_b, 0.0)
            m2_b = tl.sum(xc * xc, axis=0)
            n = n_a + n_b
            delta = mean_b - mean_a
            mean_a = mean_a + delta * (n_b / n)
            m2_a = m2_a + m2_b + delta * delta * (n_a * n_b / n)
            n_a = n
        rstd = 1.0 / tl.sqrt(m2_a / N + eps)
        tl.store(Mean + row, mean_a)
        tl.store(Rstd + row, rstd)
        # Pass 2: normalize, scale, shift.
        for off in range(0, N, BLOCK_N):
            ok = off + cols < N
            x = tl.load(x_row + off + cols, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = (x - mean_a) * rstd
            if HAS_W:
                y = y * tl.load(W + off + cols, mask=ok, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(B + off + cols, mask=ok, other=0.0).to(tl.float32)
            tl.store(y_row + off + cols, y.to(Y.dtype.element_ty), mask=ok, eviction_policy="evict_first")


@triton.jit
def _add_pair(a1, a2, b1, b2):
    """Combine function of a two-operand sum (tl.reduce over a (Σ g⊙x̂, Σ g) pair)."""
    return a1 + b1, a2 + b2


@triton.jit
def _ln_bwd_resident(
    DY,  # upstream gradient (M, N), row stride stride_dy
    X,  # forward input (M, N), row stride stride_x
    W,  # gain γ (N,) or unused (HAS_W False ⇒ γ ≡ 1 and no dγ)
    Mean,  # fp32 (M,) saved μ
    Rstd,  # fp32 (M,) saved rstd
    DX,  # output dx (M, N), row stride stride_dx, dtype of X
    DW_part,  # fp32 (P, N): this program's Σ dy ⊙ x̂ over its rows (row pid); unused if not HAS_W
    DB_part,  # fp32 (P, N): this program's Σ dy over its rows; unused if not HAS_B
    stride_dy,
    stride_x,
    stride_dx,
    M,
    N,
    BLOCK_N: tl.constexpr,
    ROWS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    STAGES: tl.constexpr,  # pipelining depth of the row loop (1: none)
):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    else:
        w = tl.where(col_ok, 1.0, 0.0)
    dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    # Persistent loop: this program's rows in a fixed order ⇒ deterministic partials.
    for start in tl.range(pid * ROWS, M, n_prog * ROWS, num_stages=STAGES):
        rows = start + tl.arange(0, ROWS)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)
        x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows64[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        # the (c1, c2) pair in one two-operand reduction: one pass over the row's lanes and one exchange
        # through shared memory for both, where two tl.sum calls reduce (and synchronize) twice
        c1, c2 = tl.reduce((xhat * g, g), 1, _add_pair)
        c1 = c1 / N
        c2 = c2 / N
        dx = (g - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(DX + rows64[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_W:
            dw_acc += tl.sum(dy * xhat, axis=0)
        if HAS_B:
            db_acc += tl.sum(dy, axis=0)
    if HAS_W:
        tl.store(DW_part + pid * N + cols, dw_acc, mask=col_ok)
    if HAS_B:
        tl.store(DB_part + pid * N + cols, db_acc, mask=col_ok)


@triton.jit
def _ln_bwd_shifted(
    DY,  # upstream gradient (M, N), row stride N, 16-byte aligned
    X,  # forward input (M, N), row stride N, 16-byte aligned
    W,  # gain γ (N,) or unused (HAS_W False ⇒ γ ≡ 1 and no dγ)
    Mean,  # fp32 (M,) saved μ
    Rstd,  # fp32 (M,) saved rstd
    DX,  # output dx (M, N), row stride N, 16-byte aligned
    DW_part,  # fp32 (P, N): this program's Σ dy ⊙ x̂ over its rows (row pid); unused if not HAS_W
    DB_part,  # fp32 (P, N): this program's Σ dy; unused if not HAS_B
    stride_dy,
    stride_x,
    stride_dx,
    M,
    N,  # the strides all equal N (the launcher checks)
    BLOCK_N: tl.constexpr,  # ≥ N
    VEC: tl.constexpr,  # elements in 16 bytes
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    STAGES: tl.constexpr,  # pipelining depth of the row loop
):
    # The resident backward for N not a multiple of 16, with 16-byte loads and stores: rows are read as
    # head + aligned body + tail as in _ln_fwd_shifted. The grid P is a multiple of VEC (or ≥ M), so the
    # rows pid, pid + P, … of one program all start at the same offset from a 16-byte boundary: one split
    # serves them all, and the dγ/dβ accumulators keep one column layout (body lane k ↔ column head + k).
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    head, body, tail = _split(tl.cast(pid, tl.int64) * stride_x, N, VEC)
    cols = tl.arange(0, BLOCK_N)
    ends = tl.arange(0, VEC)
    b_ok = cols < body
    h_ok = ends < head
    t_ok = ends < tail
    if HAS_W:  # column of body element k: head + k (element-wise loads, once per program)
        wh, wb, wt = _load3(W, 0, head, body, cols, ends, b_ok, h_ok, t_ok)
    else:
        wh, wb, wt = tl.where(h_ok, 1.0, 0.0), tl.where(b_ok, 1.0, 0.0), tl.where(t_ok, 1.0, 0.0)
    dwh = tl.zeros([VEC], dtype=tl.float32)
    dwb = tl.zeros([BLOCK_N], dtype=tl.float32)
    dwt = tl.zeros([VEC], dtype=tl.float32)
    dbh = tl.zeros([VEC], dtype=tl.float32)
    dbb = tl.zeros([BLOCK_N], dtype=tl.float32)
    dbt = tl.zeros([VEC], dtype=tl.float32)
    for row in tl.range(pid, M, n_prog, num_stages=STAGES):
        start = tl.cast(row, tl.int64) * stride_x  # the same offset from a boundary as row pid's
        at = tl.multiple_of(start + head, VEC)
        mean = tl.load(Mean + row)
        rstd = tl.load(Rstd + row)
        xh, xb, xt = _load3(X, start, at, body, cols, ends, b_ok, h_ok, t_ok)
        yh, yb, yt = _load3(DY, start, at, body, cols, ends, b_ok, h_ok, t_ok)
        nh = tl.where(h_ok, (xh - mean) * rstd, 0.0)
        nb = tl.where(b_ok, (xb - mean) * rstd, 0.0)
        nt = tl.where(t_ok, (xt - mean) * rstd, 0.0)
        gh, gb, gt = yh * wh, yb * wb, yt * wt
        c1 = (tl.sum(nb * gb, axis=0) + tl.sum(nh * gh, axis=0) + tl.sum(nt * gt, axis=0)) / N
        c2 = (tl.sum(gb, axis=0) + tl.sum(gh, axis=0) + tl.sum(gt, axis=0)) / N
        _store3(
            DX,
            start,
            at,
            body,
            cols,
            ends,
            b_ok,
            h_ok,
            t_ok,
            (gh - (nh * c1 + c2)) * rstd,
            (gb - (nb * c1 + c2)) * rstd,
            (gt - (nt * c1 + c2)) * rstd,
        )
        if HAS_W:
            dwh += yh * nh
            dwb += yb * nb
            dwt += yt * nt
        if HAS_B:
            dbh += yh
            dbb += yb
            dbt += yt
    if HAS_W:  # columns as γ's above
        _store3(DW_part + pid * N, 0, head, body, cols, ends, b_ok, h_ok, t_ok, dwh, dwb, dwt)
    if HAS_B:
        _store3(DB_part + pid * N, 0, head, body, cols, ends, b_ok, h_ok, t_ok, dbh, dbb, dbt)


@triton.jit
def _ln_bwd_looped(
    DY,  # upstream gradient (M, N), row stride stride_dy
    X,  # forward input (M, N), row stride stride_x
    W,  # gain γ (N,) or unused
    Mean,  # fp32 (M,) saved μ
    Rstd,  # fp32 (M,) saved rstd
    DX,  # output dx (M, N), row stride stride_dx
    DW_part,  # fp32 (P, N), uninitialised: row pid is owned by program pid (written, then read-modify-write)
    DB_part,  # fp32 (P, N), uninitialised, same ownership
    stride_dy,
    stride_x,
    stride_dx,
    M,
    N,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    STAGES: tl.constexpr,  # pipelining depth of the chunk loops (1: none)
):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    # The grid is at most M programs, so row pid is every program's first row: there the partial row is
    # written without being read (n_read = 0 columns), so the buffer needs no zero fill.
    for row in range(pid, M, n_prog):
        n_read = tl.where(row > pid, N, 0)
        x_row = X + tl.cast(row, tl.int64) * stride_x
        dy_row = DY + tl.cast(row, tl.int64) * stride_dy
        dx_row = DX + tl.cast(row, tl.int64) * stride_dx
        mean = tl.load(Mean + row)
        rstd = tl.load(Rstd + row)
        # Pass 1: the two row reductions c1 = mean(g ⊙ x̂), c2 = mean(g).
        s1 = tl.zeros([BLOCK_N], dtype=tl.float32)
        s2 = tl.zeros([BLOCK_N], dtype=tl.float32)
        for off in tl.range(0, N, BLOCK_N, num_stages=STAGES):
            ok = off + cols < N
            x = tl.load(x_row + off + cols, mask=ok, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + off + cols, mask=ok, other=0.0).to(tl.float32)
            if HAS_W:
                dy = dy * tl.load(W + off + cols, mask=ok, other=0.0).to(tl.float32)
            xhat = tl.where(ok, (x - mean) * rstd, 0.0)
            s1 += dy * xhat
            s2 += dy
        c1 = tl.sum(s1, axis=0) / N
        c2 = tl.sum(s2, axis=0) / N
        # Pass 2: dx and this program's partials.
        for off in tl.range(0, N, BLOCK_N, num_stages=STAGES):
            ok = off + cols < N
            x = tl.load(x_row + off + cols, mask=ok, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + off + cols, mask=ok, other=0.0).to(tl.float32)
            xhat = tl.where(ok, (x - mean) * rstd, 0.0)
            g = dy
            if HAS_W:
                g = dy * tl.load(W + off + cols, mask=ok, other=0.0).to(tl.float32)
                p = DW_part + pid * N + off + cols
                tl.store(p, tl.load(p, mask=off + cols < n_read, other=0.0) + dy * xhat, mask=ok)
            if HAS_B:
                p = DB_part + pid * N + off + cols
                tl.store(p, tl.load(p, mask=off + cols < n_read, other=0.0) + dy, mask=ok)
            dx = (g - (xhat * c1 + c2)) * rstd
            tl.store(dx_row + off + cols, dx.to(DX.dtype.element_ty), mask=ok)


@triton.jit
def _column_sum(
    Part,  # fp32 (S, P, N) partials, row-major: S = grid axis 1 (1 or 2) slabs of P rows each
    Out,  # (N,) Σ_p Part[0, p, :] in its own dtype
    Out2,  # (N,) Σ_p Part[1, p, :] in its own dtype (axis-1 program 1); unused when S = 1
    P,
    N,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # A narrow strip of BLOCK_C columns per program (many programs: N / BLOCK_C × S), walked down the P
    # partial rows BLOCK_P at a time into a (BLOCK_P, BLOCK_C) accumulator, then one tree sum over its
    # rows. The order is fixed by the shape alone: same inputs ⇒ same bits. No atomics.
    slab = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < N
    base = Part + slab.to(tl.int64) * P * N
    acc = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for p0 in tl.range(0, P, BLOCK_P, num_stages=SUM_STAGES):
        ps = p0 + tl.arange(0, BLOCK_P)
        mask = (ps < P)[:, None] & col_ok[None, :]
        acc += tl.load(base + ps.to(tl.int64)[:, None] * N + cols[None, :], mask=mask, other=0.0)
    total = tl.sum(acc, axis=0)
    if slab == 0:
        tl.store(Out + cols, total.to(Out.dtype.element_ty), mask=col_ok)
    else:
        tl.store(Out2 + cols, total.to(Out2.dtype.element_ty), mask=col_ok)
