"""Triton LayerNorm backward for rows longer than the resident backward holds (N > 8192): split rows.

Maths as in ln_bwd_triton.py (dx = rstd · (g − x̂ · c1 − c2), c1 = mean(g ⊙ x̂), c2 = mean(g), g = γ ⊙ dy).
Each row is split into K = cdiv(N, BLOCK_S) column segments:
  * `_ln_bwd_split_stats` runs a persistent grid (P, K): program (p, k) walks rows p, p + P, … over segment
    k only, writes the segment's (Σ g⊙x̂, Σ g) pair of each row to a small fp32 (M, K, 2) buffer, and keeps
    the segment's dγ/dβ partial in registers (written once, to row p of the [P, N] slab: no
    read-modify-write; `_column_sum` then sums the slab as for the other tiers).
  * `_ln_bwd_split_dx` combines each row's K pairs in a fixed order (one tl.sum over K lanes) and writes
    dx, one (row, segment) per program, rows in reverse order so the first it reads are the last the
    stats kernel read (the likeliest still in L2).
x and dy are read twice (≈ 5·M·N·s bytes in all; the looped kernel this replaced moved up to ≈ 13: two
reads plus an fp32 read-modify-write of its partial row per row), no segment's state outgrows registers,
and no program waits on another: deterministic, no atomics, no locks.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.ln_bwd_triton import _add_pair

SPLIT_BLOCK = 4096  # column segment (as wide as the resident tier's comfortable rows)


@triton.jit
def _ln_bwd_split_stats(
    DY,  # upstream gradient (M, N), row stride stride_dy
    X,  # forward input (M, N), row stride stride_x
    W,  # gain γ (N,) or unused (HAS_W False ⇒ γ ≡ 1 and no dγ)
    Mean,  # fp32 (M,) saved μ
    Rstd,  # fp32 (M,) saved rstd
    C,  # fp32 (M, K, 2) output: (Σ g⊙x̂, Σ g) of row r over segment k at C[r, k]
    DW_part,  # fp32 (P, N): program (p, k) writes columns of segment k of row p; unused if not HAS_W
    DB_part,  # fp32 (P, N), same layout; unused if not HAS_B
    stride_dy,
    stride_x,
    M,
    N,
    BLOCK_S: tl.constexpr,  # segment width: segment k is columns [k·BLOCK_S, (k+1)·BLOCK_S) ∩ [0, N)
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    STAGES: tl.constexpr,  # pipelining depth of the row loop (1: none)
):
    pid = tl.program_id(0)
    seg = tl.program_id(1)
    n_prog = tl.num_programs(0)
    n_seg = tl.num_programs(1)
    cols = seg * BLOCK_S + tl.arange(0, BLOCK_S)
    ok = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    else:
        w = tl.where(ok, 1.0, 0.0)
    dw_acc = tl.zeros([BLOCK_S], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_S], dtype=tl.float32)
    # this program's rows of its segment, in a fixed order ⇒ deterministic partials
    for row in tl.range(pid, M, n_prog, num_stages=STAGES):
        r64 = tl.cast(row, tl.int64)
        x = tl.load(X + r64 * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(DY + r64 * stride_dy + cols, mask=ok, other=0.0).to(tl.float32)
        mean = tl.load(Mean + row)
        rstd = tl.load(Rstd + row)
        xhat = tl.where(ok, (x - mean) * rstd, 0.0)
        g = dy * w
        c1, c2 = tl.reduce((xhat * g, g), 0, _add_pair)
        at = C + (r64 * n_seg + seg) * 2
        tl.store(at, c1)
        tl.store(at + 1, c2)
        if HAS_W:
            dw_acc += dy * xhat
        if HAS_B:
            db_acc += dy
    if HAS_W:
        tl.store(DW_part + pid * N + cols, dw_acc, mask=ok)
    if HAS_B:
        tl.store(DB_part + pid * N + cols, db_acc, mask=ok)


@triton.jit
def _ln_bwd_split_dx(
    DY,  # upstream gradient (M, N), row stride stride_dy
    X,  # forward input (M, N), row stride stride_x
    W,  # gain γ (N,) or unused
    Mean,  # fp32 (M,) saved μ
    Rstd,  # fp32 (M,) saved rstd
    C,  # fp32 (M, K, 2) from _ln_bwd_split_stats
    DX,  # output dx (M, N), row stride stride_dx, dtype of X
    stride_dy,
    stride_x,
    stride_dx,
    M,
    N,
    K,  # segments per row
    BLOCK_S: tl.constexpr,
    BLOCK_K: tl.constexpr,  # ≥ K
    HAS_W: tl.constexpr,
):
    # One (row, segment) per program, flattened (a grid's second axis is limited to 65535): rows from the
    # last, so the first rows read are the ones _ln_bwd_split_stats read last.
    pid = tl.program_id(0)
    row = M - 1 - pid // K
    seg = pid % K
    r64 = tl.cast(row, tl.int64)
    ks = tl.arange(0, BLOCK_K)
    pairs = C + (r64 * K + ks) * 2
    k_ok = ks < K
    # the row's K partial pairs in one fixed-order sum: the same c1, c2 for every segment of the row
    c1 = tl.sum(tl.load(pairs, mask=k_ok, other=0.0), axis=0) / N
    c2 = tl.sum(tl.load(pairs + 1, mask=k_ok, other=0.0), axis=0) / N
    cols = seg * BLOCK_S + tl.arange(0, BLOCK_S)
    ok = cols < N
    x = tl.load(X + r64 * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    dy = tl.load(DY + r64 * stride_dy + cols, mask=ok, other=0.0).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    g = dy
    if HAS_W:
        g = dy * tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    dx = (g - (xhat * c1 + c2)) * rstd
    tl.store(DX + r64 * stride_dx + cols, dx.to(DX.dtype.element_ty), mask=ok)
