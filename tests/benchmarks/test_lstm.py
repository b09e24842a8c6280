"""`normlab bench lstm` (LN-LSTM ÷ nn.LSTM with and without the C step, loop overhead) and the engine's CUDA
benchmark's skip: tiny shapes, the keys and the bookkeeping (not speed)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import engine_cuda as bench_cuda
from benchmarks import engine_loop as bench_loop
from benchmarks import lstm as bench_small_batch


def test_ratio_table_runs_every_side_on_the_same_threads_and_restores_them():
    before = torch.get_num_threads()
    rows = bench_small_batch.measure_ratio_table(
        batches=(1, 32), hiddens=(4,), seq_len=3, repeats=2, warmup=0, threads=1
    )
    assert [(r["B"], r["H"], r["threads"]) for r in rows] == [(1, 4, 1), (32, 4, 1)]
    for r in rows:
        assert min(r["engine_ms"], r["engine_torch_ops_ms"], r["torch_lstm_ms"]) > 0
        # (the ms are rounded to µs: at these tiny shapes that moves the ratio by a few %)
        assert r["ratio"] == pytest.approx(r["engine_ms"] / r["torch_lstm_ms"], rel=0.05)
        assert r["ratio_torch_ops"] == pytest.approx(r["engine_torch_ops_ms"] / r["torch_lstm_ms"], rel=0.05)
    assert [r["target"] for r in rows] == [2.5, 1.5]  # the guard rails at B = 1 and B = 32
    assert all(r["meets_target"] == (r["ratio"] <= r["target"]) for r in rows)
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="≥ 1"):
        bench_small_batch.measure_ratio_table(threads=0)


def test_loop_overhead_alternates_engine_and_plain_steps(tmp_path):
    from normlab.settings import Settings
    from normlab_client.spec import RunSpec

    settings = Settings(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    res = bench_loop.measure_loop_overhead(
        settings, task="digits", norm="layer", steps=6, warmup=2, repeats=2
    )
    assert res["engine_ms"] > 0 and res["plain_ms"] > 0
    assert res["ratio"] == pytest.approx(res["engine_ms"] / res["plain_ms"])
    assert [len(v) for v in res["runs_ms"].values()] == [2, 2] and res["steps"] == 6
    spec = RunSpec(task="digits", norm="layer", steps=8, eval_every=100_000, device="cpu").resolved()
    engine, plain = bench_loop._interleaved_step_times(spec, settings)
    assert len(engine) == 7 and len(plain) == 7  # one plain step after each engine step


def test_cli_prints_json_with_the_table_and_no_loop(capsys, settings):
    argv = ["--json", "--seq-len", "2", "--repeats", "1", "--no-loop"]
    assert bench_small_batch.main(argv, settings) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["lnlstm_vs_torch_lstm"]) == 6 and out["loop_overhead"] is None
    assert out["engine"] == {"kernel_backend": "torch", "cuda_graphs": True, "c_step": True}
    with pytest.raises(SystemExit):
        bench_small_batch.main(["--threads", "0"], settings)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the skip path is for machines without CUDA")
def test_engine_cuda_benchmark_says_why_it_skips(capsys, settings):
    assert bench_cuda.main(["--json"], settings) == 0
    assert "no CUDA GPU" in json.loads(capsys.readouterr().out)["skipped"]
