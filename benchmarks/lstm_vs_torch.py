"""`measure_lnlstm_ratio(...)`: time of the engine's LN-LSTM vs `torch.nn.LSTM` (fwd+bwd), side by side.

Contenders on the same input, interleaved repeat by repeat so a busy machine slows all alike: the
engine's LN-LSTM layer (eq. 20, `workers.engine.recurrent.LSTMLayer`) with its automatic thread choice
for the recurrence (see `workers.engine.lstm_seq`) and, for transparency, pinned to all threads and to
one; a plain Python-loop LN-LSTM (per-step autograd, the textbook way); and `torch.nn.LSTM` without
normalization. Medians are reported, with ratios to `torch.nn.LSTM`, and the load average seen.
Run alone: ``python -m benchmarks.lstm_vs_torch [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from torch import nn

from normlab.settings import Settings
from workers.engine import lstm_seq
from workers.engine.options import DEFAULT, EngineOptions
from workers.engine.recurrent import LSTMLayer

TARGET_RATIO = 1.5


class PythonLoopLNLSTM(nn.Module):
    """The textbook LN-LSTM (eq. 20): every step's products, LNs and gates through per-step autograd."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        G = 4 * hidden_size
        self.w_x = nn.Linear(input_size, G, bias=False)
        self.w_h = nn.Linear(hidden_size, G, bias=False)
        self.ln_x, self.ln_h, self.ln_c = nn.LayerNorm(G), nn.LayerNorm(G), nn.LayerNorm(hidden_size)
        self.bias = nn.Parameter(torch.zeros(G))
        self.hidden_size = hidden_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T, B, _ = x.shape
        h = x.new_zeros(B, self.hidden_size)
        c = x.new_zeros(B, self.hidden_size)
        outs = []
        for t in range(T):
            gates = self.ln_h(self.w_h(h)) + self.ln_x(self.w_x(x[t])) + self.bias
            f, i, o, g = gates.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(self.ln_c(c))
            outs.append(h)
        return torch.stack(outs)


def _time_once(module: nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(wall, process CPU) seconds of fwd+bwd."""
    module.zero_grad(set_to_none=True)
    start, cpu = time.perf_counter(), time.process_time()
    out = module(x)
    if isinstance(out, tuple):  # nn.LSTM returns (output, (h, c))
        out = out[0]
    out.sum().backward()
    return time.perf_counter() - start, time.process_time() - cpu


def measure_lnlstm_ratio(
    batch: int = 32,
    seq_len: int = 64,
    hidden: int = 256,
    repeats: int = 7,
    warmup: int = 2,
    seed: int = 0,
    options: EngineOptions = DEFAULT,
) -> dict:
    """Median fwd+bwd seconds of engine LN-LSTM, Python-loop LN-LSTM and torch.nn.LSTM, and ratios."""
    if min(batch, seq_len, hidden, repeats) < 1:
        raise ValueError("batch, seq_len, hidden and repeats must all be ≥ 1")
    torch.manual_seed(seed)
    engine = LSTMLayer(hidden, hidden, "layer", placement="full")
    threads = torch.get_num_threads()
    contenders = {  # name -> (module, recurrence threads)
        "engine": (engine, options.recurrence_threads),
        "engine_all_threads": (engine, threads),
        "engine_one_thread": (engine, 1),
        "python_loop": (PythonLoopLNLSTM(hidden, hidden), None),
        "torch_lstm": (nn.LSTM(hidden, hidden), None),
    }
    x = torch.randn(seq_len, batch, hidden)  # time-major for all
    times: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, list[float]] = {k: [] for k in contenders}
    load_before = _load()
    auto_threads = lstm_seq.recurrence_threads(options.recurrence_threads)
    for r in range(warmup + repeats):
        for name, (module, n) in contenders.items():
            if module is engine:  # one layer, its recurrence's threads as this contender's
                engine.engine_options = options.replace(recurrence_threads=n)
            wall, used = _time_once(module, x)
            if r >= warmup:
                times[name].append(wall)
                cpu[name].append(used)
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    ratio = med["engine"] / med["torch_lstm"]
    return {
        "batch": batch,
        "seq_len": seq_len,
        "hidden": hidden,
        "repeats": repeats,
        "device": "cpu",
        "threads": threads,
        "recurrence_threads_auto": auto_threads,
        "load_average": [load_before, _load()],
        "engine_s": med["engine"],
        "engine_all_threads_s": med["engine_all_threads"],
        "engine_one_thread_s": med["engine_one_thread"],
        "python_loop_s": med["python_loop"],
        "torch_lstm_s": med["torch_lstm"],
        "ratio_engine_vs_torch": ratio,
        "ratio_engine_all_threads_vs_torch": med["engine_all_threads"] / med["torch_lstm"],
        "ratio_engine_one_thread_vs_torch": med["engine_one_thread"] / med["torch_lstm"],
        "ratio_python_loop_vs_torch": med["python_loop"] / med["torch_lstm"],
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
        # CPU seconds (all threads of the process): less sensitive to other processes than wall time
        "cpu_s": cpu_med,
        "ratio_engine_vs_torch_cpu": cpu_med["engine"] / cpu_med["torch_lstm"],
        "times_s": times,
    }


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main(argv: list[str] | None, settings: Settings) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lstm_vs_torch", description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads for the whole run (default: torch's choice)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            p.error(f"--threads must be ≥ 1 (got {args.threads})")
        torch.set_num_threads(args.threads)
    options = EngineOptions.from_settings(settings)
    res = measure_lnlstm_ratio(args.batch, args.seq_len, args.hidden, args.repeats, options=options)
    if args.json:
        print(json.dumps(res))
        return 0
    load = [("?" if v is None else f"{v:.1f}") for v in res["load_average"]]
    print(
        f"LN-LSTM fwd+bwd, B={res['batch']} T={res['seq_len']} H={res['hidden']}, {res['threads']} threads "
        f"(recurrence: {res['recurrence_threads_auto']} auto), median of {res['repeats']}, load average "
        f"{load[0]} -> {load[1]}:"
    )
    rows = (
        ("engine", "engine LN-LSTM (auto)"),
        ("engine_all_threads", "engine, all threads"),
        ("engine_one_thread", "engine, one thread"),
        ("python_loop", "Python-loop LN-LSTM"),
        ("torch_lstm", "torch.nn.LSTM (no norm)"),
    )
    print(f"  {'':<26} {'wall':>8}    {'ratio':>6}  {'CPU':>8}    {'ratio':>6}")
    cpu = res["cpu_s"]
    for key, label in rows:
        wall = res[key + "_s"]
        ratio = f"{wall / res['torch_lstm_s']:5.2f}x" if key != "torch_lstm" else ""
        cpu_ratio = f"{cpu[key] / cpu['torch_lstm']:5.2f}x" if key != "torch_lstm" else ""
        print(f"  {label:<26} {wall * 1e3:8.1f} ms {ratio:>6}  {cpu[key] * 1e3:8.1f} ms {cpu_ratio:>6}")
    verdict = "meets" if res["meets_target"] else "misses"
    print(
        f"  engine / torch.nn.LSTM = {res['ratio_engine_vs_torch']:.2f}x: {verdict} the target "
        f"≤ {TARGET_RATIO}x"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(None, Settings()))  # an edge: the settings are read here
