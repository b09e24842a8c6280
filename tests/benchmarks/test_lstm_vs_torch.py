"""bench_lstm smoke test: tiny shapes, the keys and positive times (not speed)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.lstm_vs_torch import PythonLoopLNLSTM, main, measure_lnlstm_ratio
from workers.engine.recurrent import LSTMLayer


def test_measure_returns_times_and_ratios():
    res = measure_lnlstm_ratio(batch=2, seq_len=3, hidden=4, repeats=2, warmup=0)
    for key in (
        "engine_s",
        "python_loop_s",
        "torch_lstm_s",
        "ratio_engine_vs_torch",
        "ratio_python_loop_vs_torch",
    ):
        assert res[key] > 0, key
    assert res["ratio_engine_vs_torch"] == pytest.approx(res["engine_s"] / res["torch_lstm_s"])
    assert (res["batch"], res["seq_len"], res["hidden"]) == (2, 3, 4)
    assert res["meets_target"] == (res["ratio_engine_vs_torch"] <= res["target_ratio"])
    assert all(len(v) == 2 for v in res["times_s"].values())


def test_rejects_empty_shapes():
    with pytest.raises(ValueError, match="≥ 1"):
        measure_lnlstm_ratio(batch=0)


def test_python_loop_contender_is_the_same_eq20():
    # the slow contender computes what the engine computes (same parameters -> same outputs)
    torch.manual_seed(0)
    loop, eng = PythonLoopLNLSTM(3, 4).double(), LSTMLayer(3, 4, "layer").double()
    with torch.no_grad():
        eng.ih.weight.copy_(loop.w_x.weight)
        eng.hh.weight.copy_(loop.w_h.weight)
        eng.bias.copy_(loop.bias)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(eng(x), loop(x))


def test_main_json(capsys, settings):
    argv = ["--batch", "2", "--seq-len", "2", "--hidden", "3", "--repeats", "1", "--json"]
    assert main(argv, settings) == 0
    assert json.loads(capsys.readouterr().out)["hidden"] == 3
