"""`normlab run`: train one run headless, with a progress bar on stderr, and print its outcome.

Every `RunSpec` field is an option, generated from `RunSpec.model_fields` (a new field appears here
without a second definition); the probes are switched on with ``--probes`` and tuned with
``--probe-<field>``. ``--json`` prints exactly one JSON object on stdout:
``{"spec", "status", "step", "metrics", "wall_time", "device", "kernel_backend", "error"[, "probes"]}``.
Exit status: 0 completed or diverged (a diverged run is a result), 1 failed, 2 a spec or data problem
the user can fix (nothing trained), 130 interrupted (the run ends as cancelled and is still reported).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import types
import typing
from typing import TYPE_CHECKING, Any, Literal

from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from normlab_client.events import Event, RunResult, RunStatus
from normlab_client.spec import LINEAGE_FIELDS, ProbeSpec, RunSpec

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from normlab.cli import Subcommands
    from normlab.settings import Settings

    # workers.engine.train (imported late: it loads torch)
    Train = Callable[..., RunResult]

EXIT_CODES = {RunStatus.COMPLETED: 0, RunStatus.DIVERGED: 0, RunStatus.FAILED: 1, RunStatus.CANCELLED: 130}


def _option(parser: argparse._ActionsContainer, flag: str, dest: str, field: FieldInfo) -> None:
    """Add one option for a pydantic field: choices for Literals, --x/--no-x for bools."""
    annotation = field.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    default = field.get_default(call_default_factory=False)
    shown = "the task's default" if default is None else repr(default)
    kwargs: dict[str, Any] = {
        "dest": dest,
        "default": None,
        # argparse %-formats help strings: a literal "%" in a description is written "%%"
        "help": f"{field.description} (default: {shown})".replace("%", "%%"),
    }
    if typing.get_origin(annotation) is Literal:
        choices = list(typing.get_args(annotation))
        kwargs.update(choices=choices, type=type(choices[0]), metavar="{" + ",".join(map(str, choices)) + "}")
    elif annotation is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs.update(type=annotation, metavar=getattr(annotation, "__name__", "value").upper())
    parser.add_argument(flag, **kwargs)


def add_spec_options(parser: argparse.ArgumentParser) -> None:
    """One option per RunSpec field (dest spec_<name>) and per ProbeSpec field (dest probe_<name>)."""
    spec_group = parser.add_argument_group("run spec (omitted options take the spec's / task's defaults)")
    for name, field in RunSpec.model_fields.items():
        if name != "probes" and name not in LINEAGE_FIELDS:
            _option(spec_group, "--" + name.replace("_", "-"), f"spec_{name}", field)
    probe_group = parser.add_argument_group("probes (hidden-state traces, Fisher curvature)")
    probe_group.add_argument(
        "--probes", action="store_true", help=ProbeSpec.model_fields["enabled"].description
    )
    for name, field in ProbeSpec.model_fields.items():
        if name != "enabled":
            _option(probe_group, "--probe-" + name.replace("_", "-"), f"probe_{name}", field)


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The RunSpec the options describe; a user mistake raises CLIError with the spec's own message."""
    from pydantic import ValidationError

    from normlab.cli import CLIError

    values = {
        n: getattr(args, f"spec_{n}")
        for n in RunSpec.model_fields
        if n != "probes" and n not in LINEAGE_FIELDS
    }
    values = {n: v for n, v in values.items() if v is not None}
    probes = {n: getattr(args, f"probe_{n}") for n in ProbeSpec.model_fields if n != "enabled"}
    probes = {n: v for n, v in probes.items() if v is not None}
    if probes and not args.probes:
        flags = ", ".join("--probe-" + n.replace("_", "-") for n in probes)
        raise CLIError(f"{flags} only tune the probes; add --probes to switch them on.")
    if args.probes:
        values["probes"] = {"enabled": True, **probes}
    try:
        return RunSpec(**values)
    except ValidationError as exc:
        raise CLIError(" ".join(_explain(e) for e in exc.errors())) from None


def _explain(error: ErrorDetails) -> str:
    if error["type"] == "spec_combination" or not error["loc"]:
        return error["msg"]
    loc = [str(p) for p in error["loc"]]
    flag = "--probe-" + loc[-1] if loc[0] == "probes" else "--" + loc[0]
    return f"{flag.replace('_', '-')}: {error['msg']}."


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "run",
        help="train one run headless and print its outcome",
        description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 completed or diverged, 1 failed, 2 bad spec or missing data, 130 interrupted.",
    )
    add_spec_options(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object with the outcome")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from normlab.cli import CLIError, settings_from
    from normlab_client.catalog import task_availability

    settings = settings_from(args)  # first: it loads the registered normalizers the spec may name
    spec = spec_from_args(args)
    available = task_availability(spec.task, settings.data_dir)
    if not available.available:
        raise CLIError(available.reason)
    import torch  # after the cheap checks: a bad option answers at once

    if spec.device == "cuda" and not torch.cuda.is_available():
        raise CLIError("--device cuda: this machine has no CUDA GPU; use --device auto or cpu.")
    from workers.engine import train

    resolved = spec.resolved()
    err = Console(stderr=True)
    stop = {"asked": False}

    def on_interrupt(*_: object) -> None:  # first Ctrl-C: end as 'cancelled' after this step; second: abort
        if stop["asked"]:
            raise KeyboardInterrupt
        stop["asked"] = True
        err.print("Stopping after this step (Ctrl-C again to abort).", style="yellow")

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        result = _train_with_progress(train, resolved, settings, err, lambda: stop["asked"])
    finally:
        signal.signal(signal.SIGINT, previous)
    out = {
        "spec": resolved.model_dump(mode="json"),
        "status": result.status,
        "step": result.step,
        "metrics": result.metrics,
        "wall_time": result.wall_time,
        "device": result.device,
        "kernel_backend": result.kernel_backend,
        "engine": result.engine,
        "error": result.error,
    }
    if resolved.probes.enabled:
        out["probes"] = result.probes
    if args.json:
        print(json.dumps(out, default=str))
    else:
        _print_summary(out, Console())
    return EXIT_CODES.get(result.status, 1)


def _train_with_progress(
    train: Train, spec: RunSpec, settings: Settings, err: Console, should_stop: Callable[[], bool]
) -> RunResult:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = [
        TextColumn(f"{spec.task}/{spec.norm}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    ]
    with Progress(*columns, console=err, transient=False) as progress:
        bar = progress.add_task("train", total=spec.steps, info="")

        def on_event(event: Event) -> None:
            if event.kind == "scalars":
                p = event.payload
                info = f"loss {p['train_loss']:.4g}"
                for key in ("val_loss", "accuracy", "bpc"):
                    if p.get(key) is not None:
                        info += f"  {key} {p[key]:.4g}"
                progress.update(bar, completed=event.step, info=info)
            elif event.kind == "log":
                style = {"warning": "yellow", "error": "red"}.get(str(event.payload.get("level")), "dim")
                progress.console.print(event.payload.get("message", ""), style=style, markup=False)
            elif event.terminal:
                progress.update(bar, completed=event.step)

        return train(spec, on_event, should_stop, settings=settings)


def _print_summary(out: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    console.print(
        f"[bold]{out['status']}[/bold] after {out['step']} steps in {out['wall_time']:.1f} s "
        f"on {out['device']} (LayerNorm kernels: {out['kernel_backend']})"
    )
    if out["error"]:
        console.print(out["error"], style="red", markup=False)
    table = Table("metric", "value")
    for name, value in out["metrics"].items():
        table.add_row(name, "—" if value is None else f"{value:.4f}")
    console.print(table)


if __name__ == "__main__":  # pragma: no cover
    from normlab.cli import main

    sys.exit(main(["run", *sys.argv[1:]]))
