"""`normlab bench engine`: on a tiny subset, the JSON keys and positive figures (not speed)."""

from __future__ import annotations

import json

import pytest

from normlab.cli import main

TINY_LSTM = ["--lstm-batch", "2", "--lstm-seq-len", "3", "--lstm-hidden", "8", "--lstm-repeats", "1"]


def test_bench_engine_json_on_a_tiny_subset(data_dir, capsys):
    argv = [
        "bench",
        "engine",
        "--json",
        "--tasks",
        "digits,seq-digits,mnist",
        "--norms",
        "none,layer",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--rounds",
        "2",
        *TINY_LSTM,
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measured_steps"] == 2 and out["warmup_steps"] == 1 and out["rounds"] == 2
    assert out["threads"] >= 1
    rows = {(r["task"], r["norm"]): r for r in out["steps_per_s"]}
    assert set(rows) == {(t, n) for t in ("digits", "seq-digits", "mnist") for n in ("none", "layer")}
    for task in ("digits", "seq-digits"):
        for norm in ("none", "layer"):
            r = rows[(task, norm)]
            assert r["status"] == "completed", r
            assert r["steps_per_s"] > 0 and r["ms_per_step"] > 0
            assert r["steps_per_s"] == pytest.approx(1e3 / r["ms_per_step"])
            assert len(r["rounds_ms"]) == 2 and r["ms_per_step"] == min(r["rounds_ms"])  # the best round
    assert rows[("seq-digits", "layer")]["model"].startswith("lstm")
    assert rows[("mnist", "none")]["status"] == "unavailable" and "IDX" in rows[("mnist", "none")]["error"]
    lstm = out["lnlstm_vs_torch_lstm"]
    assert (lstm["batch"], lstm["seq_len"], lstm["hidden"]) == (2, 3, 8)
    assert lstm["ratio_engine_vs_torch"] > 0 and lstm["engine_s"] > 0 and lstm["torch_lstm_s"] > 0


def test_bench_engine_table_and_no_lstm(data_dir, capsys):
    assert (
        main(
            [
                "bench",
                "engine",
                "--tasks",
                "conv-digits",
                "--norms",
                "group",
                "--warmup",
                "0",
                "--steps",
                "1",
                "--no-lstm",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "conv-digits" in out and "group" in out and "LN-LSTM" not in out


def test_unknown_task_is_a_usage_error(data_dir):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "engine", "--tasks", "imagenet"])
    assert exc.value.code == 2
