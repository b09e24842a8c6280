"""`normlab bench kernel`: the skip without CUDA, and a CPU dry run of every benchmark code path."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels import bench


@pytest.mark.skipif(torch.cuda.is_available(), reason="the skip path is for machines without CUDA")
def test_without_cuda_it_says_why_and_skips(capsys):
    assert bench.main(["--json"]) == 0
    assert "no CUDA GPU" in json.loads(capsys.readouterr().out)["skipped"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the real benchmark runs instead")
def test_smoke_run_covers_every_impl_mode_and_the_lstm(tmp_path, capsys):
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}  # a child: this process keeps triton compiled
    cmd = [sys.executable, "-m", "kernels.bench", "--smoke", "--json", "--out", str(tmp_path)]
    proc = subprocess.run(
        cmd, cwd=Path(__file__).parents[2], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "kernel_bench.json").read_text())
    ln = result["layer_norm"]
    # `normlab` is kernels.layer_norm with its size-aware dispatch (torch on CPU tensors); no Liger here
    impls = ("triton", "normlab", "torch")
    assert {(r["dtype"], r["impl"], r["mode"]) for r in ln} == {
        (d, impl, mode) for d in bench.DTYPES for impl in impls for mode in bench.MODES
    }
    assert all(r["ms_graph"] is None and r["host_us"] is None for r in ln)  # no CUDA graphs on a CPU
    # |y| stays below 16 here, where one bf16 ulp is 0.0625 (the interpreter truncates to bf16).
    assert all(r["max_err_y"] < 0.07 for r in ln), [r for r in ln if r["max_err_y"] >= 0.07]
    # kernels/ imports nothing of ours: the engine's own LN-LSTM rows are workers/engine/bench_cuda.py's
    assert {r["impl"] for r in result["ln_lstm"]} == {
        "cudnn nn.LSTM (no norm)",
        bench.SEQUENCE,
        bench.SEQUENCE_EAGER,
        "fused LN-LSTM (triton cell per step)",
        "plain PyTorch LN-LSTM",
    }
    # each case at both precisions: TF32 off for everyone, then on for everyone
    assert [r["precision"] for r in result["ln_lstm"] if r["impl"] == bench.SEQUENCE] == ["fp32", "tf32"]
    copied = [r["graph_copied_MiB"] for r in result["ln_lstm"] if r["impl"] == bench.SEQUENCE]
    assert len(copied) == 2 and min(copied) >= 0
    assert result["copy_ceiling"] is None and result["backward_profile"] == []  # CUDA-only parts
    assert {r["impl"] for r in result["ln_gru"]} == {
        "cudnn nn.GRU (no norm)",
        bench.GRU_SEQUENCE,
        bench.GRU_SEQUENCE_EAGER,
        "plain PyTorch LN-GRU",
    }
    boundary = result["summary"]["dispatch_boundary"]
    assert boundary["LN_TRITON_MIN_ELEMS"] == kernels.LN_TRITON_MIN_ELEMS and boundary["fwd"]["shapes"] == 1
    assert result["summary"]["gru_fused_sequence_max_x_cudnn (no target)"] > 0
    assert "lstm_fused_sequence_max_x_cudnn (target <= 1.3)" in result["summary"]
    streamed = (tmp_path / "kernel_bench.jsonl").read_text().splitlines()
    assert len(streamed) == len(ln) + len(result["ln_lstm"]) + len(result["ln_gru"])
    # The targets checked on the streamed rows (what a run cut by a time limit leaves) equal the summary.
    with (tmp_path / "kernel_bench.jsonl").open("a") as f:
        f.write('{"layer_norm": {"M": 8, "N"')  # the half line a killed run may leave
    assert bench.main(["--summarize", str(tmp_path / "kernel_bench.jsonl"), "--json"]) == 0
    from_stream = json.loads(capsys.readouterr().out)
    assert from_stream["layer_norm_rows"] == len(ln) and from_stream["ln_lstm_rows"] == len(result["ln_lstm"])
    assert from_stream["ln_gru_rows"] == len(result["ln_gru"])
    assert from_stream["summary"] == result["summary"]
    assert result["not_measured"] == []


def test_spent_budget_still_writes_the_summary_and_lists_what_was_left(tmp_path, capsys):
    pytest.importorskip("triton")
    assert bench.main(["--smoke", "--json", "--out", str(tmp_path), "--budget-s", "0"]) == 0
    result = json.loads((tmp_path / "kernel_bench.json").read_text())
    assert result["layer_norm"] == [] and result["ln_lstm"] == [] and result["ln_gru"] == []
    # the smoke grid: one LayerNorm case per dtype, one LN-LSTM and one LN-GRU case at two precisions (the
    # copy ceiling and the profile need CUDA: not cases on a CPU)
    assert len(result["not_measured"]) == len(bench.DTYPES) + 4
    assert {"lstm B=2 T=3 H=8 fp32", "gru B=2 T=3 H=8 tf32"} <= set(result["not_measured"])
    assert result["summary"]["lstm_fused_sequence_max_x_cudnn (target <= 1.3)"] is None


def test_parts_pick_and_order_what_is_measured(tmp_path, capsys):
    pytest.importorskip("triton")
    # a spent budget measures nothing but lists every case it reached, in the order it reached them
    assert (
        bench.main(["--smoke", "--json", "--out", str(tmp_path), "--budget-s", "0", "--parts", "gru,ln:fp32"])
        == 0
    )
    result = json.loads((tmp_path / "kernel_bench.json").read_text())
    assert result["parts"] == ["gru", "ln:fp32"]
    assert result["not_measured"] == ["gru B=2 T=3 H=8 fp32", "gru B=2 T=3 H=8 tf32", "ln fp32 M=8 N=37"]
    assert bench.main(["--smoke", "--json", "--budget-s", "0"]) == 0  # default: every part, bf16 first
    default = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert default["parts"] == list(bench.PARTS) and default["not_measured"][:2] == [
        "ln bf16 M=8 N=37",
        "lstm B=2 T=3 H=8 fp32",
    ]
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--smoke", "--parts", "lstm,ln:fp8"])
    assert exit_info.value.code == 2
    assert "unknown part(s) ln:fp8" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--smoke", "--precompile", "--shard", "2/2"])
    assert "0 <= I < K" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU dry run; on a GPU gpu_check.sh does this")
def test_precompiled_baselines_are_loaded_from_the_caches_by_the_benchmark(tmp_path):
    # What scripts/gpu_check.sh does while the tests run: processes side by side compile their share of the
    # torch.compile baselines; the benchmark then finds every graph in inductor's on-disk caches.
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}

    def child(*args):
        cmd = [sys.executable, "-m", "kernels.bench", "--smoke", "--compiled", "--json", *args]
        proc = subprocess.run(
            cmd, cwd=Path(__file__).parents[2], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout.splitlines()[-1])

    parts = ("--parts", "ln:fp32,lstm,ln:bf16+fp32w")
    shares = [child("--precompile", "--shard", f"{i}/2", *parts) for i in range(2)]
    assert [s["precompiled"] for s in shares] == [["fp32 N=37"], ["bf16+fp32w N=37"]]
    # each: the training forward, its backward and the inference forward, compiled and saved
    assert [s["compile_cache"].get("fxgraph_cache_miss") for s in shares] == [3, 3]
    result = child("--parts", "ln:fp32,ln:bf16+fp32w")
    assert result["compile_cache"].get("fxgraph_cache_miss", 0) == 0
    assert result["compile_cache"]["fxgraph_cache_hit"] == 6
    assert {(r["dtype"], r["impl"]) for r in result["layer_norm"]} >= {
        ("fp32", "torch.compile"),
        ("bf16+fp32w", "torch.compile/mixed"),
    }


def test_summarize_without_the_file_is_a_message(tmp_path, capsys):
    assert bench.main(["--summarize", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_summary_checks_odd_rows_and_long_rows_against_their_own_targets():
    # Rows made up for the check (no GPU): bf16, M·N ≥ 32M; pct_peak per (N, mode).
    def row(N, mode, pct, impl="triton", ms=1.0):
        return {"M": 65536, "N": N, "dtype": "bf16", "mode": mode, "impl": impl, "ms": ms, "pct_peak": pct}

    rows = [
        row(4096, "fwd", 88.0),
        row(4099, "fwd", 71.0),
        row(5120, "fwd", 83.0),
        row(8192, "bwd", 81.0),
        row(16384, "bwd", 60.0),
        row(16384, "bwd", 40.0, impl="torch", ms=2.0),
    ]
    s = bench.summarize(rows, [])
    assert s["fwd_bf16_big_min_pct_peak (target >= 85)"] == 88.0
    assert s["fwd_bf16_big_odd_n_min_pct_peak (target >= 85)"] == 71.0
    assert s["bwd_bf16_big_min_pct_peak (target >= 80)"] == 81.0
    assert s["bwd_bf16_big_n_over_8192_min_pct_peak (target >= 65)"] == 60.0
    assert s["bwd_bf16_big_min_speedup_vs_torch (target >= 1.5)"] == 2.0
