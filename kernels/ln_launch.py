"""Launch heuristics of the LayerNorm kernels (and the fused cells' grids): which tier, block sizes, warps
and persistent grid each shape gets, computed once per shape (`_fwd_launch` / `_bwd_launch` /
`_sum_launch` are cached). Plain Python over torch's device properties: no kernel runs here.
"""

# No `from __future__ import annotations`, like the op modules (torch 2.11 on the GPU machine).
import functools
from typing import NamedTuple

import torch
import triton

from kernels import ln_bwd_triton as KB
from kernels import ln_split_triton as KS
from kernels import ln_triton as K

TIERS = {
    "auto": 0,
    "resident": 1,
    "looped": 2,
}  # 'looped' forces the long-row tiers (forward looped, backward split)
SUM_BLOCK_P = 32  # partial rows per step of `_column_sum`
SUM_BLOCK_C = 128  # widest column strip of one `_column_sum` program (narrower when that adds programs)


@functools.lru_cache(maxsize=8)
def persistent_programs(device: torch.device) -> int:
    """How many programs a persistent backward grid launches on this device (a few per SM)."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the interpreter runs programs one by one: few programs keep CPU tests fast


class SM(NamedTuple):
    """What one streaming multiprocessor offers resident blocks (torch's device properties)."""

    count: int
    regs: int = 65536
    threads: int = 2048
    shared: int = 228 * 1024
    max_blocks: int = 32


@functools.lru_cache(maxsize=8)
def sm_of(device: torch.device) -> SM:
    p = torch.cuda.get_device_properties(device)
    return SM(
        p.multi_processor_count,
        getattr(p, "regs_per_multiprocessor", 65536),
        getattr(p, "max_threads_per_multi_processor", 2048),
        getattr(p, "shared_memory_per_multiprocessor", 228 * 1024),
    )


def co_resident(n_regs: int, num_warps: int, shared: int, sm: SM) -> int:
    """Blocks of a kernel that fit on one SM at once: by registers (allocated per warp in units of 256),
    threads, shared memory (1 KiB reserved per block) and the per-SM block limit; at least 1."""
    per_warp = -(-max(n_regs, 1) * 32 // 256) * 256
    by_regs = sm.regs // per_warp // num_warps
    by_threads = sm.threads // (32 * num_warps)
    by_shared = sm.shared // (shared + 1024) if shared else sm.max_blocks
    return max(1, min(by_regs, by_threads, by_shared, sm.max_blocks))


def warps_for(elems: int) -> int:
    """Warps for a program holding `elems` fp32 values: about 8–16 per thread (16-byte vectors).

    Checked with ptxas -v (python -m kernels.aot) under triton 3.6 and 3.9: fewer warps at 8192 left
    ~155 registers a thread (one 8-warp program per SM); more warps at 16384 spill.
    """
    if elems <= 1024:
        return 4 if elems > 256 else 1 if elems <= 64 else 2
    if elems <= 4096:
        return 8
    if elems <= 16384:
        return 16
    return 32


class Launch(NamedTuple):
    """One LayerNorm kernel launch; `grid` is the program count (the backward's P, its partial rows)."""

    kernel: str  # 'resident' | 'shifted' | 'looped' (forward) | 'split' (backward)
    BLOCK_N: int  # the split tier's segment width
    ROWS: int
    num_warps: int
    grid: int
    STAGES: int = 1  # backward only: software-pipelining depth of its loops (see ln_bwd_triton.STAGES)
    SEGMENTS: int = 1  # split tier: column segments per row (its grid is (grid, SEGMENTS))
    TILES: tuple = ()  # shifted forward: the body's tiles (BLOCK_A, BLOCK_B, BLOCK_C), 0 = absent


class SumLaunch(NamedTuple):
    """One `_column_sum` launch over `slabs` (P, N) partial slabs: grid (cdiv(N, BLOCK_C), slabs)."""

    BLOCK_P: int
    BLOCK_C: int
    num_warps: int
    grid: tuple


def tiles(N: int) -> tuple:
    """(BLOCK_A, BLOCK_B, BLOCK_C): power-of-two tiles (0: absent) whose sum covers the longest aligned body
    a row of N elements can have (N − N % 4 elements: fp32 rows; fp16/bf16 ones have at most
    N − N % 8), wasting less than the next power of two would: two exact tiles, then one padded one
    (5120 → 4096 + 1024; 2041 → 1024 + 512 + 512; 517 → 512 + 16)."""
    n = N - N % 4
    a = 1 << (n.bit_length() - 1)
    rest = n - a
    b = 1 << (rest.bit_length() - 1) if rest >= 16 else 0
    rest -= b
    c = max(16, triton.next_power_of_2(rest)) if rest else 0
    return a, b, c


def body_tiles(N: int) -> tuple:
    """`tiles(N)` where they save at least a quarter of the lanes of one power-of-two block (4099, 5120,
    12289, 517), else that block alone (1000, 2041: the padding is small, and one tile lets more threads
    share the row)."""
    t = tiles(N)
    block = triton.next_power_of_2(N)
    return t if 4 * sum(t) <= 3 * block else (block, 0, 0)


@functools.lru_cache(maxsize=512)
def _fwd_launch(
    M: int, N: int, tier: int = 0, max_resident: int = K.MAX_RESIDENT, shifted: bool = True
) -> Launch:
    block = triton.next_power_of_2(N)
    if tier == TIERS["looped"] or (tier == 0 and block > max_resident):
        chunk = min(K.LOOP_BLOCK, max(16, block // 4))
        return Launch("looped", chunk, 1, warps_for(chunk), M)
    if shifted and tier == 0 and (N % 16 or block != N) and N >= K.MIN_SHIFTED:
        # N not a multiple of 16, or not a power of two: one row per program, read as head + 16-byte-aligned
        # body in power-of-two tiles + tail (_ln_fwd_shifted; the launcher falls back to the resident
        # kernel, one row per program, when the rows do not share X's and Y's 16-byte alignment)
        # Each tile is laid out over all the program's threads: to keep 16-byte vectors, a thread holds ≥ 8
        # elements of every tile that matters (≥ 1/4 of the row; a smaller remainder may go narrower).
        t = body_tiles(N)
        smallest = min(n for n in t if 4 * n >= sum(t))
        return Launch("shifted", block, 1, max(1, min(warps_for(sum(t)), smallest // 256)), M, TILES=t)
    rows = max(1, min(K.SMALL_ROW_ELEMS // block, 16, triton.next_power_of_2(M)))
    return Launch("resident", block, rows, warps_for(block * rows), triton.cdiv(M, rows))


@functools.lru_cache(maxsize=512)
def _bwd_launch(M: int, N: int, device: torch.device, tier: int = 0) -> Launch:
    block = triton.next_power_of_2(N)
    if tier == TIERS["looped"] or (tier == 0 and block > KB.MAX_RESIDENT_BWD):
        # Split rows: K segments of BLOCK_S columns, P programs per segment; P·K about one wave (the real P
        # comes from the compiled kernel's registers, ln_run._persistent_grid). Forced on short rows (tests),
        # the segments narrow so that a row still has several.
        seg = min(KS.SPLIT_BLOCK, max(16, block // 4))
        k = triton.cdiv(N, seg)
        return Launch(
            "split",
            seg,
            1,
            warps_for(4 * seg),
            max(1, min(max(2, persistent_programs(device) // k), M)),
            KB.STAGES.value if N % 16 == 0 else 1,
            k,
        )
    cfg = _fwd_launch(M, N, tier, KB.MAX_RESIDENT_BWD, shifted=False)
    # x, dy, γ and two partial rows stay resident: about four times the forward's register need.
    warps = warps_for(4 * cfg.BLOCK_N * cfg.ROWS)
    if tier == 0 and (N % 16 or block != N) and N >= K.MIN_SHIFTED:
        # N not a multiple of 16, or not a power of two: _ln_bwd_shifted (16-byte loads of the rows' aligned
        # bodies, held in the forward's tiles: no padding to a power of two). Its grid is a multiple of 8
        # (or M itself), so all rows of a program share their offset from a 16-byte boundary; at most 16
        # warps (ptxas -v: 32 warps spilled up to 108 bytes at 4099, 16 do not), and few enough that each
        # thread holds ≥ 4 elements of every tile that matters (it keeps ≈ 5 fp32 values an element: more
        # per thread would cost occupancy).
        t = body_tiles(N)
        smallest = min(n for n in t if 4 * n >= sum(t))
        return Launch(
            "shifted",
            cfg.BLOCK_N,
            1,
            max(1, min(16, warps_for(4 * sum(t)), smallest // 128)),
            min(M, max(8, persistent_programs(device) // 8 * 8)),
            KB.STAGES.value,
            TILES=t,
        )
    # Pipelined loops where N (so the row stride, usually) is a multiple of 16: 16-byte loads, no spills
    # (ptxas -v, sm_90); otherwise (scalar loads) pipelining spilled 80-100 bytes, so those stay plain.
    return cfg._replace(
        num_warps=warps,
        grid=max(1, min(persistent_programs(device), triton.cdiv(M, cfg.ROWS))),
        STAGES=KB.STAGES.value if N % 16 == 0 else 1,
    )


@functools.lru_cache(maxsize=512)
def _sum_launch(P: int, N: int, slabs: int, device: torch.device) -> SumLaunch:
    """Column strips narrow enough (≥ 32 columns: a 128-byte line per partial row) that even a wide-N
    sum spreads over ≥ one program per persistent slot. 4096×8192 on an H200 (P = 264, dγ and dβ): one
    launch of 256 strips × 2 slabs = 512 programs of 32 columns, where two launches of 8 programs each
    walked all 264 partial rows of 1024 columns (77 µs each)."""
    block_c = min(SUM_BLOCK_C, max(16, triton.next_power_of_2(N)))
    target = persistent_programs(device)
    while block_c > 32 and triton.cdiv(N, block_c) * slabs < target:
        block_c //= 2
    block_p = min(SUM_BLOCK_P, triton.next_power_of_2(P))
    return SumLaunch(block_p, block_c, 4, (triton.cdiv(N, block_c), slabs))


def resident_grid(cfg: Launch, M: int, blocks_per_sm: int, sms: int) -> int:
    """The backward's P for `blocks_per_sm` co-resident programs on `sms` SMs: no more programs than units of
    work (rows, or row groups of the resident tier: idle programs would only add partial rows to sum); the
    shifted tier's P a multiple of 8 (its programs' rows share their 16-byte alignment) unless that exceeds
    M; the split tier's P per segment (its grid is P × SEGMENTS)."""
    P = blocks_per_sm * sms
    if cfg.kernel == "shifted":
        P = max(8, P // 8 * 8)
    if cfg.kernel == "split":
        P = max(1, P // cfg.SEGMENTS)
    units = triton.cdiv(M, cfg.ROWS) if cfg.kernel == "resident" else M
    return max(1, min(P, units))


class CellLaunch(NamedTuple):
    """The launches of a fused recurrent cell (lstm_op, gru_op and their sequences)."""

    BLOCK_H: int
    fwd_warps: int
    programs: int  # the backward's persistent grid (rows pid, pid + programs, …)
    bwd_warps: int


@functools.lru_cache(maxsize=256)
def cell_launch(B: int, H: int, device: torch.device, fwd_rows: int, bwd_rows: int) -> CellLaunch:
    """For a cell whose forward holds about `fwd_rows` and backward `bwd_rows` fp32 rows of BLOCK_H values
    per program (the backward capped at 16 warps)."""
    block = triton.next_power_of_2(H)
    return CellLaunch(
        block,
        warps_for(fwd_rows * block),
        max(1, min(B, persistent_programs(device))),
        min(16, warps_for(bwd_rows * block)),
    )


def fwd_config(M: int, N: int, tier: int = 0, max_resident: int = K.MAX_RESIDENT) -> dict:
    """The forward launch: {'kernel': 'resident' / 'shifted' / 'looped', 'BLOCK_N', 'ROWS', 'num_warps',
    'grid', ...}."""
    return _fwd_launch(M, N, tier, max_resident)._asdict()


def bwd_config(M: int, N: int, device: torch.device, tier: int = 0) -> dict:
    """The backward launch; 'grid' is the persistent program count P (per segment for 'split')."""
    return _bwd_launch(M, N, device, tier)._asdict()


def sum_config(P: int, N: int, slabs: int = 1, device: torch.device = torch.device("cpu")) -> dict:
    """The `_column_sum` launch: {'BLOCK_P', 'BLOCK_C', 'num_warps', 'grid'} (for kernels.aot)."""
    return _sum_launch(P, N, slabs, device)._asdict()
