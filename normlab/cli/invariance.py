"""`normlab invariance [--json]`: the paper's Table 1 (§5.1), computed by the engine, not copied."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from normlab.table1 import Table1, Transform

if TYPE_CHECKING:
    from normlab.cli import Subcommands

_SHORT: dict[Transform, str] = {
    "weight_matrix_rescaling": "W scale",
    "weight_matrix_recentering": "W shift",
    "weight_vector_rescaling": "w_i scale",
    "dataset_rescaling": "data scale",
    "dataset_recentering": "data shift",
    "single_training_case_rescaling": "case scale",
}


def register(sub: Subcommands) -> None:
    p = sub.add_parser("invariance", help="compute Table 1: which transformations each normalizer ignores")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--seed", type=int, default=0, help="seed of the random layers and batches")
    p.add_argument("--tol", type=float, default=None, help="largest |Δ| still called invariant")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from normlab.cli import CLIError

    if args.tol is not None and not args.tol > 0:
        raise CLIError(f"--tol must be positive (got {args.tol}); the default is 1e-9.")
    if args.seed < 0:
        raise CLIError(f"--seed must be ≥ 0 (got {args.seed}).")
    from normlab.cli import settings_from
    from normlab.table1 import with_registered
    from normlab_client.norms import registered
    from workers.engine.invariance import DEFAULT_TOL, compute_table1, registered_rows  # torch: here only

    settings_from(args)  # loads the registered normalizers (entry points, NORMLAB_PLUGINS): extra rows
    tol = args.tol if args.tol is not None else DEFAULT_TOL
    result = compute_table1(seed=args.seed, tol=tol)
    names = sorted(registered())
    if names:
        result = with_registered(result, registered_rows(names, args.seed, tol), names)
    if args.json:
        print(result.model_dump_json())
        return 0
    print(format_table(result))
    return 0


def format_table(result: Table1) -> str:
    """Table 1 for humans: one row per method; '*' marks a cell that differs from the printed table."""
    keys = list(_SHORT)
    lines = [
        f"Table 1, computed (float64, tolerance {result.tolerance:g} on max |Δ| of layer outputs)",
        f"{'':<8}" + "".join(f"{_SHORT[k]:>12}" for k in keys),
    ]
    for method, row in result.methods.items():
        agrees = {str(m): row for m, row in result.agrees_with_paper_table.items()}.get(method)
        cells = []
        for k in keys:
            mark = "" if agrees is None or agrees[k] else "*"
            cells.append(f"{('Invariant' if row[k] else 'No') + mark:>12}")
        extra = "  (extra row)" if method in result.extra_methods else ""
        lines.append(f"{method:<8}" + "".join(cells) + extra)
    verdict = (
        "all 18 cells of the paper's three methods agree with the printed table"
        if result.all_paper_cells_agree
        else "'*' marks cells where the computation differs from the printed table"
    )
    lines.append(f"\n{verdict}.")
    lines.extend(f"Note: {n}" for n in result.notes)
    return "\n".join(lines)
