"""Triton LayerNorm backward kernels: a fused, deterministic dx + per-program dγ/dβ partials, and their sum.

Maths (ln_triton.py has the forward), per row with x̂ = (x − μ)·rstd from the saved fp32 μ, rstd, g = γ ⊙ dy:
    dx = rstd · (g − x̂ · c1 − c2),   c1 = mean(g ⊙ x̂),   c2 = mean(g)
    dγ = Σ_rows dy ⊙ x̂,   dβ = Σ_rows dy
Tiers by N (launch heuristics in ln_launch.py):
  * resident (next_pow2(N) ≤ MAX_RESIDENT_BWD): a persistent grid of P programs, each owning rows pid,
    pid + P, … with the whole row in registers and its own dγ/dβ partial in registers, written once to row
    pid of a [P, N] slab; for small N each program takes ROWS rows at once.
  * shifted (resident sizes, N ≥ MIN_SHIFTED not a multiple of 16 or not a power of two): the same, rows
    read as an unaligned head, a 16-byte-aligned body in up to three power-of-two tiles and a tail (see
    ln_triton._ln_fwd_shifted), so odd N keeps 16-byte loads and no row is padded to a power of two; the
    grid is a multiple of 8 so a program's rows share one alignment.
  * split (longer rows): each row split over K column segments, in two kernels (ln_split_triton.py).
dγ and dβ partials share one fp32 (2, P, N) buffer, and one launch of `_column_sum` (a 2-D grid of narrow
column strips × the two slabs) sums the P partials column by column in a fixed order. No atomics, no
locks, no zero fill (every partial row and every pair is written before it is read): the result is bitwise
identical on repeats for a given device and shape, whatever the buffers held before.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.ln_triton import _load3, _load_tile, _split, _store3

MAX_RESIDENT_BWD = 8192  # ptxas -v: the resident backward (x, dy, γ and two partial rows) spills above
# Software pipelining of the loops in the persistent kernels (the backward tiers, the column sum): the next
# row's (or tile's) loads go to shared memory by cp.async while this one is worked on. The H200 profile
# showed the resident backward at ≈ 50 % of peak with one 32-warp program per SM: nothing was in flight
# during each row's reductions and stores. ptxas -v (sm_90) with 16-byte loads (N a multiple of 16): no
# spills, 33-82 KB of shared memory; with scalar loads (other N) 80-100 bytes of spills, so the backward
# launches those with STAGES=1 (ln_launch._bwd_launch).
STAGES = tl.constexpr(2)  # the backward's depth where N % 16 == 0
SUM_STAGES = tl.constexpr(2)  # the column sum's (no spills either way)


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
def _bwd_tile(X, DY, W, at, head, cols, ok, mean, rstd, HAS_W: tl.constexpr):
    """(x̂, dy, g = γ ⊙ dy) of one body tile of a row (positions as in ln_triton._load_tile)."""
    x = _load_tile(X, at, cols, ok)
    dy = _load_tile(DY, at, cols, ok)
    n = tl.where(ok, (x - mean) * rstd, 0.0)
    g = dy
    if HAS_W:
        g = dy * tl.load(W + head + cols, mask=ok, other=0.0).to(tl.float32)
    return n, dy, g


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
    BLOCK_A: tl.constexpr,  # the body's tiles as in ln_triton._ln_fwd_shifted (B, C: 0 = absent)
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    VEC: tl.constexpr,  # elements in 16 bytes
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    STAGES: tl.constexpr,  # pipelining depth of the row loop
):
    # The resident backward for N not a multiple of 16 or not a power of two, with 16-byte loads and stores
    # and no padding to a power of two: rows are read as head + aligned body (in up to three power-of-two
    # tiles) + tail as in _ln_fwd_shifted. The grid P is a multiple of VEC (or ≥ M), so the rows pid,
    # pid + P, … of one program all start at the same offset from a 16-byte boundary: one split serves
    # them all, and the dγ/dβ accumulators keep one column layout (body lane k ↔ column head + k). γ's
    # tiles B and C are reloaded per row (from cache) to keep registers for the rows.
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    head, body, tail = _split(tl.cast(pid, tl.int64) * stride_x, N, VEC)
    cols = tl.arange(0, BLOCK_A)
    ends = tl.arange(0, VEC)
    b_ok = cols < body
    h_ok = ends < head
    t_ok = ends < tail
    if HAS_W:  # column of body element k: head + k (element-wise loads, once per program)
        wh, wb, wt = _load3(W, 0, head, body, cols, ends, b_ok, h_ok, t_ok)
    else:
        wh, wb, wt = tl.where(h_ok, 1.0, 0.0), tl.where(b_ok, 1.0, 0.0), tl.where(t_ok, 1.0, 0.0)
    dwh = tl.zeros([VEC], dtype=tl.float32)
    dwb = tl.zeros([BLOCK_A], dtype=tl.float32)
    dwt = tl.zeros([VEC], dtype=tl.float32)
    dbh = tl.zeros([VEC], dtype=tl.float32)
    dbb = tl.zeros([BLOCK_A], dtype=tl.float32)
    dbt = tl.zeros([VEC], dtype=tl.float32)
    if BLOCK_B > 0:
        cols_b = BLOCK_A + tl.arange(0, BLOCK_B)
        ok_b = cols_b < body
        dw_b = tl.zeros([BLOCK_B], dtype=tl.float32)
        db_b = tl.zeros([BLOCK_B], dtype=tl.float32)
    if BLOCK_C > 0:
        cols_c = BLOCK_A + BLOCK_B + tl.arange(0, BLOCK_C)
        ok_c = cols_c < body
        dw_c = tl.zeros([BLOCK_C], dtype=tl.float32)
        db_c = tl.zeros([BLOCK_C], dtype=tl.float32)
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
        s1 = tl.sum(nb * gb, axis=0) + tl.sum(nh * gh, axis=0) + tl.sum(nt * gt, axis=0)
        s2 = tl.sum(gb, axis=0) + tl.sum(gh, axis=0) + tl.sum(gt, axis=0)
        if BLOCK_B > 0:
            n_b, y_b, g_b = _bwd_tile(X, DY, W, at, head, cols_b, ok_b, mean, rstd, HAS_W)
            s1 += tl.sum(n_b * g_b, axis=0)
            s2 += tl.sum(g_b, axis=0)
        if BLOCK_C > 0:
            n_c, y_c, g_c = _bwd_tile(X, DY, W, at, head, cols_c, ok_c, mean, rstd, HAS_W)
            s1 += tl.sum(n_c * g_c, axis=0)
            s2 += tl.sum(g_c, axis=0)
        c1 = s1 / N
        c2 = s2 / N
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
        ty = DX.dtype.element_ty
        if BLOCK_B > 0:
            tl.store(DX + at + cols_b, ((g_b - (n_b * c1 + c2)) * rstd).to(ty), mask=ok_b)
        if BLOCK_C > 0:
            tl.store(DX + at + cols_c, ((g_c - (n_c * c1 + c2)) * rstd).to(ty), mask=ok_c)
        if HAS_W:
            dwh += yh * nh
            dwb += yb * nb
            dwt += yt * nt
            if BLOCK_B > 0:
                dw_b += y_b * n_b
            if BLOCK_C > 0:
                dw_c += y_c * n_c
        if HAS_B:
            dbh += yh
            dbb += yb
            dbt += yt
            if BLOCK_B > 0:
                db_b += y_b
            if BLOCK_C > 0:
                db_c += y_c
    if HAS_W:  # columns as γ's above
        _store3(DW_part + pid * N, 0, head, body, cols, ends, b_ok, h_ok, t_ok, dwh, dwb, dwt)
        if BLOCK_B > 0:
            tl.store(DW_part + pid * N + head + cols_b, dw_b, mask=ok_b)
        if BLOCK_C > 0:
            tl.store(DW_part + pid * N + head + cols_c, dw_c, mask=ok_c)
    if HAS_B:
        _store3(DB_part + pid * N, 0, head, body, cols, ends, b_ok, h_ok, t_ok, dbh, dbb, dbt)
        if BLOCK_B > 0:
            tl.store(DB_part + pid * N + head + cols_b, db_b, mask=ok_b)
        if BLOCK_C > 0:
            tl.store(DB_part + pid * N + head + cols_c, db_c, mask=ok_c)


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
