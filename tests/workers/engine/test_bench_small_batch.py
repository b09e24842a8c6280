"""`normlab bench lstm` (small-batch LN-LSTM ÷ nn.LSTM, loop overhead), the oneDNN per-step gate, and the
engine's CUDA benchmark's skip: tiny shapes, the keys and the bookkeeping (not speed)."""

from __future__ import annotations

import json

import pytest
import torch

from workers.engine import bench_cuda, bench_loop, bench_small_batch, lstm_native, onednn


def test_ratio_table_runs_both_sides_on_the_same_threads_and_restores_them():
    before, was = torch.get_num_threads(), onednn.available()
    rows = bench_small_batch.measure_ratio_table(
        batches=(1, 8), hiddens=(4,), seq_len=3, repeats=2, warmup=0, threads=1
    )
    assert [(r["B"], r["H"], r["threads"]) for r in rows] == [(1, 4, 1), (8, 4, 1)]
    for r in rows:
        assert min(r["engine_ms"], r["engine_before_ms"], r["torch_lstm_ms"]) > 0
        # (the ms are rounded to µs: at these tiny shapes that moves the ratio by a few %)
        assert r["ratio"] == pytest.approx(r["engine_ms"] / r["torch_lstm_ms"], rel=0.05)
        assert r["target"] == 2.0 and r["meets_target"] == (r["ratio"] <= 2.0)
    assert torch.get_num_threads() == before
    assert onednn.available() == was  # the "before" switch is undone
    with pytest.raises(ValueError, match="≥ 1"):
        bench_small_batch.measure_ratio_table(threads=0)


def test_per_step_products_take_onednn_only_where_it_is_faster():
    w128, w256 = torch.empty(512, 128), torch.empty(1024, 256)
    assert not onednn.per_step(1, w128) and not onednn.per_step(32, w128)
    assert not onednn.per_step(1, w256) and onednn.per_step(8, w256) and onednn.per_step(32, w256)


@pytest.mark.parametrize("B", [1, 8])
def test_the_c_path_gives_the_same_numbers_either_side_of_the_gate(monkeypatch, B):
    # torch.mm or oneDNN for the per-step product, or MKL for every product: the same LN-LSTM to float32
    # rounding.
    from workers.engine.recurrent import LSTMLayer

    if not lstm_native.native.applies(torch.zeros(1)):
        pytest.skip("no C compiler: the C path is not taken")
    torch.manual_seed(0)
    layer = LSTMLayer(256, 256, "layer", placement="full")
    x = torch.randn(5, B, 256)

    def run():
        layer.zero_grad(set_to_none=True)
        out = layer(x)
        out.square().sum().backward()
        return [out.detach()] + [p.grad.clone() for p in layer.parameters()]

    if not onednn.supported():
        pytest.skip("this torch has no oneDNN")
    with onednn.forced(True):
        gated = run()
        monkeypatch.setattr(onednn, "MIN_STEP_ROWS", 0)
        monkeypatch.setattr(onednn, "MIN_STEP_DEPTH", 0)
        always = run()
    monkeypatch.undo()
    with onednn.forced(False):
        mkl = run()  # every product through torch's own (MKL)
    for a, b in zip(gated, mkl, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-4)
    for a, b in zip(gated, always, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-4)


def test_loop_overhead_alternates_engine_and_plain_steps(tmp_path):
    from normlab.settings import Settings
    from normlab.spec import RunSpec

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
    with pytest.raises(SystemExit):
        bench_small_batch.main(["--threads", "0"], settings)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the skip path is for machines without CUDA")
def test_engine_cuda_benchmark_says_why_it_skips(capsys, settings):
    assert bench_cuda.main(["--json"], settings) == 0
    assert "no CUDA GPU" in json.loads(capsys.readouterr().out)["skipped"]
