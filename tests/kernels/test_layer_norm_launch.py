"""The LayerNorm's launch heuristics and occupancy arithmetic (pure Python: no GPU, no interpreter)."""

import pytest
import torch

pytest.importorskip("triton")

from kernels import layer_norm_op  # noqa: E402

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_rows_up_to_32k_stay_resident_in_the_forward_and_8k_in_the_backward():
    assert not layer_norm_op.fwd_launch(64, 32768, CPU).long and layer_norm_op.fwd_launch(64, 32769, CPU).long
    assert not layer_norm_op.bwd_launch(64, 8192, CPU).long and layer_norm_op.bwd_launch(64, 8193, CPU).long
    assert layer_norm_op.fwd_launch(64, 32768, CPU).num_warps == 32


@pytest.mark.parametrize(
    "N,tiles", [(1, (1, 0)), (7, (4, 4)), (1000, (512, 512)), (4096, (4096, 0)), (4099, (4096, 4)),
                (5120, (4096, 1024)), (20001, (16384, 4096))],
)  # fmt: skip
def test_a_resident_row_is_two_power_of_two_tiles(N, tiles):
    meta = layer_norm_op.fwd_launch(8, N, CPU).meta
    assert (meta["BLOCK_A"], meta["BLOCK_B"]) == tiles


def test_short_rows_share_a_step_and_the_grid_is_persistent(monkeypatch):
    monkeypatch.setattr(layer_norm_op, "_sm_count", lambda device: 132)
    fwd = layer_norm_op.fwd_launch(1_000_000, 37, CUDA)  # 32 + 8 lanes, 16 rows a step: 640 values, 4 warps
    assert fwd.meta["ROWS"] == 16 and fwd.num_warps == 4 and fwd.grid == (8 * 132,)  # 1024 threads an SM
    assert layer_norm_op.fwd_launch(1_000_000, 37, CUDA, per_sm=5).grid == (5 * 132,)
    assert layer_norm_op.fwd_launch(40, 37, CUDA).grid == (3,)  # never more programs than row blocks
    bwd = layer_norm_op.bwd_launch(1_000_000, 512, CUDA, per_sm=3)
    assert bwd.meta["ROWS"] == 4 and bwd.grid == (3 * 132, 1)
    assert bwd.grid[0] * bwd.rows_per_program >= 1_000_000 > (bwd.grid[0] - 1) * bwd.rows_per_program
    long = layer_norm_op.bwd_launch(1_000_000, 65536, CUDA, per_sm=2)  # 16 column segments share the SMs
    assert long.long and long.grid == (2 * 132 // 16, 16) and long.meta["ROWS"] == 1


@pytest.mark.parametrize(
    "regs,warps,shared,programs",
    [(32, 4, 0, 16), (40, 8, 0, 6), (128, 16, 0, 1), (64, 8, 100 * 1024, 2), (255, 32, 0, 1)],
)
def test_occupancy_is_the_least_of_threads_registers_and_shared_memory(regs, warps, shared, programs):
    # an H100 SM: 65536 registers, 2048 threads, 228 KiB shared memory; registers per warp in 256s
    assert layer_norm_op.occupancy(regs, warps, shared, 65536, 2048, 228 * 1024) == programs


def test_the_grid_comes_from_the_compiled_kernels_registers(monkeypatch):
    class Props:
        multi_processor_count, regs_per_multiprocessor = 132, 65536
        max_threads_per_multi_processor, shared_memory_per_multiprocessor = 2048, 228 * 1024

    class Compiled:  # what a compiled kernel reports once its binary is loaded
        run, n_regs = object(), 40

        class metadata:
            shared = 0

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props)
    assert layer_norm_op.programs_per_sm(Compiled, 8, CUDA) == 6
    Compiled.n_regs = 0  # unknown: the caller keeps its default grid
    assert layer_norm_op.programs_per_sm(Compiled, 8, CUDA) is None
