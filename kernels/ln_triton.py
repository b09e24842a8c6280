"""Triton LayerNorm forward kernels: y, fp32 mean, fp32 rstd (the backward is in ln_bwd_triton.py).

Maths (the paper's eq. 15, population variance), per row x of length N:
    μ = Σ x / N,   σ² = Σ (x − μ)² / N,   rstd = 1 / √(σ² + ε),   x̂ = (x − μ)·rstd,   y = γ ⊙ x̂ + β
All statistics accumulate in fp32 whatever the activation dtype; fp32 weights may meet fp16/bf16
activations. Tiers by N (launch heuristics in ln_launch.py):
  * resident (BLOCK_N = next_pow2(N) ≤ MAX_RESIDENT): the whole row stays in registers, the variance is the
    centred two-pass on the resident row; for small N each program takes ROWS rows at once.
  * shifted (resident sizes, N ≥ MIN_SHIFTED not a multiple of 16 or not a power of two): rows read as an
    unaligned head, a 16-byte-aligned body and a tail, so odd N keeps 16-byte loads and stores (the
    resident kernel, compiled for such N, loads element by element: the PTX shows it), the body held as
    up to three power-of-two tiles so the row is not padded to the next power of two. One row per program.
  * looped (larger N): persistent, one row at a time walked in chunks; the statistics merge chunk by
    chunk with Chan's parallel formula (stable), then a second walk normalizes (the row is then in L2).
Masked tails (cols < N) keep every N correct.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Largest power-of-two row kept in registers: ptxas -v (python -m kernels.aot) shows spills above it
# (forward at 32768 with 32 warps).
MAX_RESIDENT = 16384
LOOP_BLOCK = 4096  # chunk of the looped tier
SMALL_ROW_ELEMS = 4096  # a resident program handles about this many elements (ROWS rows × BLOCK_N)
MIN_SHIFTED = (
    512  # rows at least this long, N not a multiple of 16 (forward: or of 2), take the shifted kernels
)


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
def _load_tile(ptr, at, cols, ok):
    """One tile of a row's aligned body (from `at`, on a 16-byte boundary) as fp32."""
    return tl.load(ptr + at + cols, mask=ok, other=0.0).to(tl.float32)


@triton.jit
def _store_tile(Y, W, B, at, head, cols, ok, centred, rstd, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """y of one body tile from its centred values; γ/β columns are head + the body position."""
    y = centred * rstd
    if HAS_W:
        y = y * tl.load(W + head + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(B + head + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + at + cols, y.to(Y.dtype.element_ty), mask=ok)


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
    BLOCK_A: tl.constexpr,  # the body's tiles: A, then B and C (0: absent), A + B + C ≥ N − N % 4
    BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr,
    VEC: tl.constexpr,  # elements in 16 bytes (8 for fp16/bf16, 4 for fp32)
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
):
    # One row per program, for N not a multiple of 16 (where Triton can prove neither the rows' 16-byte
    # alignment nor that the `cols < N` mask is constant over a vector, and so loads element by element)
    # or not a power of two (where one power-of-two block would pad the row: 5120 would run 8192 lanes).
    # Each row is read as an unaligned head (< VEC elements), a 16-byte-aligned body whose length is a
    # multiple of VEC (both facts given to the compiler by tl.multiple_of, so the body moves in 16-byte
    # vectors), and a tail (< VEC). The body is held as up to three power-of-two tiles (ln_launch.tiles:
    # 5120 = 4096 + 1024, 4099 → 4096, 12289 → 8192 + 4096), so lanes ≈ N, not next_pow2(N). X and Y share
    # the row stride and alignment (the launcher checks), so one split serves both. Same maths as
    # _ln_fwd_resident (centred two-pass on the resident row).
    row = tl.program_id(0)
    start = tl.cast(row, tl.int64) * stride_x  # the row's first element, in X and in Y
    head, body, tail = _split(start, N, VEC)
    ends = tl.arange(0, VEC)
    h_ok = ends < head
    t_ok = ends < tail
    at = tl.multiple_of(start + head, VEC)  # the body's first element: on a 16-byte boundary
    cols_a = tl.arange(0, BLOCK_A)
    a_ok = cols_a < body
    xh, xa, xt = _load3(X, start, at, body, cols_a, ends, a_ok, h_ok, t_ok)
    total = tl.sum(xa, axis=0) + tl.sum(xh, axis=0) + tl.sum(xt, axis=0)
    if BLOCK_B > 0:
        cols_b = BLOCK_A + tl.arange(0, BLOCK_B)
        b_ok = cols_b < body
        xb = _load_tile(X, at, cols_b, b_ok)
        total += tl.sum(xb, axis=0)
    if BLOCK_C > 0:
        cols_c = BLOCK_A + BLOCK_B + tl.arange(0, BLOCK_C)
        c_ok = cols_c < body
        xc = _load_tile(X, at, cols_c, c_ok)
        total += tl.sum(xc, axis=0)
    mean = total / N
    ca = tl.where(a_ok, xa - mean, 0.0)
    ch = tl.where(h_ok, xh - mean, 0.0)
    ct = tl.where(t_ok, xt - mean, 0.0)
    sq = tl.sum(ca * ca, axis=0) + tl.sum(ch * ch, axis=0) + tl.sum(ct * ct, axis=0)
    if BLOCK_B > 0:
        cb = tl.where(b_ok, xb - mean, 0.0)
        sq += tl.sum(cb * cb, axis=0)
    if BLOCK_C > 0:
        cc = tl.where(c_ok, xc - mean, 0.0)
        sq += tl.sum(cc * cc, axis=0)
    rstd = 1.0 / tl.sqrt(sq / N + eps)
    yh = ch * rstd
    ya = ca * rstd
    yt = ct * rstd
    if HAS_W:  # γ's column of body element k is head + k: these loads stay element-wise (from cache)
        wh, wa, wt = _load3(W, 0, head, body, cols_a, ends, a_ok, h_ok, t_ok)
        yh, ya, yt = yh * wh, ya * wa, yt * wt
    if HAS_B:
        bh, ba, bt = _load3(B, 0, head, body, cols_a, ends, a_ok, h_ok, t_ok)
        yh, ya, yt = yh + bh, ya + ba, yt + bt
    _store3(Y, start, at, body, cols_a, ends, a_ok, h_ok, t_ok, yh, ya, yt)
    if BLOCK_B > 0:
        _store_tile(Y, W, B, at, head, cols_b, b_ok, cb, rstd, HAS_W, HAS_B)
    if BLOCK_C > 0:
        _store_tile(Y, W, B, at, head, cols_c, c_ok, cc, rstd, HAS_W, HAS_B)
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
