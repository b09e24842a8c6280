"""`normlab depth-init [--depth N] [--seeds 0,1,2,3,4] [--json]`: rank collapse at initialisation.

For none / BatchNorm / LayerNorm: the effective rank of a batch's representation and ‖∂ℓ/∂h_l‖ at a few
depths of a ReLU MLP before any training (workers/probes/depth_init.py), mean over seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normlab.cli import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("depth-init", help="rank collapse with depth at initialisation, none vs BN vs LN")
    p.add_argument("--depth", type=int, default=50, help="layers (default 50)")
    p.add_argument("--width", type=int, default=128, help="units per layer (default 128)")
    p.add_argument("--batch", type=int, default=64, help="cases in the batch (default 64)")
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (default 0,1,2,3,4)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from normlab.cli import CLIError
    from normlab.cli.reproduce import parse_seeds

    seeds = parse_seeds(args.seeds) or [0]
    if not 1 <= args.depth <= 500 or not 2 <= args.width <= 2048 or not 2 <= args.batch <= 4096:
        raise CLIError("--depth takes 1–500, --width 2–2048 and --batch 2–4096 (BatchNorm needs ≥ 2 cases).")
    import torch

    from workers.probes.depth_init import NORMS, depth_profile

    torch.set_num_threads(1)
    out = {n: [depth_profile(n, args.depth, args.width, args.batch, s) for s in seeds] for n in NORMS}
    if args.json:
        print(json.dumps({"seeds": seeds, "profiles": out}))
        return 0
    picks = sorted({1, 2, 5, 10, 20, args.depth} & set(range(1, args.depth + 1)))
    print(
        f"Effective rank of H_l (mean over seeds {','.join(map(str, seeds))}); input ≈ "
        f"{statistics.fmean(p['input_rank'] for p in out['none']):.1f}"
    )
    print("  layer  " + "  ".join(f"{n:>18}" for n in NORMS))
    for layer in picks:
        cells = []
        for n in NORMS:
            rank = statistics.fmean(p["effective_rank"][layer - 1] for p in out[n])
            grad = statistics.fmean(p["grad_norm"][layer - 1] for p in out[n])
            cells.append(f"{rank:6.1f} ‖∂ℓ/∂h‖ {grad:7.2g}")
        print(f"  {layer:5d}  " + "  ".join(f"{c:>18}" for c in cells))
    return 0
