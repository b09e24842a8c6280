"""`normlab catalog [--json]`: the tasks, normalizers and options normlab offers here."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normlab.cli import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("catalog", help="list tasks, normalizers and option ranges")
    p.add_argument("--json", action="store_true", help="print the catalog as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from normlab.api_catalog import build_catalog
    from normlab.cli import settings_from

    settings = settings_from(args)
    catalog = build_catalog(settings.data_dir, settings)  # this server's limits, as GET /api/catalog
    if args.json:
        print(json.dumps(catalog, indent=2, default=str))
        return 0
    print("Tasks:")
    for t in catalog["tasks"]:
        mark = "" if t["available"] else f"  [unavailable: {t['unavailable_reason']}]"
        print(f"  {t['name']:<12} {t['description']}{mark}")
        print(
            f"  {'':<12} norms: {', '.join(t['norms'])}"
            + (f"; cells: {', '.join(t['cells'])}" if t["cells"] else "")
        )
    print("Normalizers:")
    for name, desc in catalog["norms"].items():
        print(f"  {name:<12} {desc}")
    return 0
