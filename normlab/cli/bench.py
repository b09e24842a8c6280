"""`normlab bench TARGET [--json] [...]`: benchmarks that print ratios measured side by side in one run.

Each target is one function ``main(argv) -> int`` in its own area's module, imported only when asked;
the ones that run the engine take the command's settings too, ``main(argv, settings)`` (read here, at the
edge, like every command's). Every benchmark prints a human table, and with ``--json`` one JSON object;
``--save`` runs it with ``--json`` and stores that object as its current result in
``benchmarks/results/TARGET.json``, from which ``normlab bench report`` renders BENCHMARKS.md
(``benchmarks.report``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import shlex
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from normlab.cli import Subcommands

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
        "normlab_client's full-resolution download vs the raw export; embed pages",
    ),
    "watch": ("benchmarks.watch", "watch()'s cost to a training loop: 4-block d=256 Transformer, CPU"),
    "demo": ("benchmarks.demo", "normlab up: click -> first point, cancel latency, page weight"),
    "fork": ("benchmarks.fork", "checkpoint overhead and bytes per task; fork -> child's first point"),
    "report": ("benchmarks.report", "render BENCHMARKS.md from the saved results (--check: compare only)"),
}
# targets whose main takes (argv, settings): they run the engine in this process
WITH_SETTINGS = {"engine", "lstm", "probes", "fork"}


def register(sub: Subcommands) -> None:
    p = sub.add_parser("bench", help="run a benchmark (" + ", ".join(TARGETS) + ")")
    p.add_argument("target", choices=sorted(TARGETS))
    p.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        help="options for the benchmark (e.g. --json; --save: store the result and render BENCHMARKS.md)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from normlab.cli import CLIError, settings_from

    module_name, _ = TARGETS[args.target]
    rest = list(args.rest)
    saving = "--save" in rest
    if saving:
        if args.target == "report":
            raise CLIError("--save stores a benchmark's result; `normlab bench report` renders them")
        rest = [a for a in rest if a != "--save"]
        rest += [] if "--json" in rest else ["--json"]
    settings = settings_from(args) if args.target in WITH_SETTINGS else None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise CLIError(f"benchmark '{args.target}' is not available: {exc}") from exc
    if not saving:
        return _main(module, rest, settings)
    captured = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, captured)):
        status = _main(module, rest, settings)
    if status != 0:
        return status
    result = _last_json_object(captured.getvalue())
    if result is None:
        raise CLIError(f"benchmark '{args.target}' printed no JSON object: nothing saved")
    report = importlib.import_module("benchmarks.report")
    tables = module.tables(result) if hasattr(module, "tables") else None
    command = " ".join(["normlab", "bench", args.target, *map(shlex.quote, rest)])
    path = report.save(args.target, command, result, tables)
    print(f"saved {path} and rendered {report.REPORT.name}", file=sys.stderr)
    return 0


def _main(module: Any, rest: list[str], settings: Any) -> int:
    if settings is not None:
        return int(module.main(rest, settings) or 0)
    return int(module.main(rest) or 0)


class _Tee(io.TextIOBase):
    """Writes to the terminal and to a buffer: a saved benchmark still shows its output."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def _last_json_object(text: str) -> Any:
    """The last line of the output that parses as a JSON object (a benchmark's --json result)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None
