"""`normlab bench TARGET [--json] [...]`: benchmarks that print ratios measured side by side in one run.

Each target is one function ``main(argv) -> int`` in its own area's module, imported only when asked;
the ones that run the engine take the command's settings too, ``main(argv, settings)`` (read here, at the
edge, like every command's). Every benchmark prints a human table, and with ``--json`` one JSON object.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

TARGETS = {
    "engine": ("benchmarks.engine", "steps/s per task and normalizer; LN-LSTM vs torch.nn.LSTM"),
    "lstm": (
        "benchmarks.lstm",
        "small-batch LN-LSTM ÷ torch.nn.LSTM (same threads); loop overhead",
    ),
    "probes": ("benchmarks.probes", "Fisher estimate cost (cold, warm, in steps); overhead on vs off"),
    "kernel": ("benchmarks.gpu_check", "the GPU check: kernel tests, LN-LSTM vs cuDNN, LayerNorm vs torch"),
    "stream": ("benchmarks.stream", "live feed latency, fan-out, submit → first event, history fetch"),
    "faults": ("benchmarks.faults", "load and fault figures of the shared lab server"),
    "frontend": ("benchmarks.frontend", "page load and live-append cost in headless Chromium"),
    "client": (
        "benchmarks.client",
        "normlab.client's full-resolution download vs the raw export; embed pages",
    ),
    "demo": ("benchmarks.demo", "normlab up: click -> first point, cancel latency, page weight"),
    "fork": ("benchmarks.fork", "checkpoint overhead and bytes per task; fork -> child's first point"),
}
# targets whose main takes (argv, settings): they run the engine in this process
WITH_SETTINGS = {"engine", "lstm", "probes", "fork"}


def register(sub: Any) -> None:  # argparse's private _SubParsersAction
    p = sub.add_parser("bench", help="run a benchmark (" + ", ".join(TARGETS) + ")")
    p.add_argument("target", choices=sorted(TARGETS))
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options for the benchmark (e.g. --json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from normlab.cli import CLIError, settings_from

    module_name, _ = TARGETS[args.target]
    settings = settings_from(args) if args.target in WITH_SETTINGS else None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CLIError(f"benchmark '{args.target}' is not available: {exc}") from exc
    if settings is not None:
        return int(module.main(list(args.rest), settings) or 0)
    return int(module.main(list(args.rest)) or 0)
