"""`normlab db upgrade`, `normlab db status`: the results store's schema (SQLite under --data-dir, or
NORMLAB_DATABASE_URL), upgraded in place by the migrations in normlab/migrations."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from normlab.cli import settings_from

if TYPE_CHECKING:
    from normlab.cli import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser("db", help="upgrade the results store's schema, or show its revision")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("upgrade", help="upgrade the store in place to this normlab's schema (back it up first)")
    verbs.add_parser("status", help="the store's schema revision and the one this normlab needs")
    for q in verbs.choices.values():
        q.add_argument("--data-dir", default=None, help="the SQLite store's folder (default ~/.normlab)")
        q.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_db)


def cmd_db(args: argparse.Namespace) -> int:
    from normlab.store import migrate
    from normlab.store.store import make_engine

    settings = settings_from(args)
    url = settings.resolved_database_url
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(url)
    try:
        if args.verb == "status":
            st = migrate.state(engine)
            out = {"revision": st.current, "head": st.head, "up_to_date": st.up_to_date}
            if args.json:
                print(json.dumps(out))
            elif st.up_to_date:
                print(f"schema at {st.head}: up to date")
            else:
                print(f"schema at {st.current or 'nothing (an empty store)'}; this normlab needs {st.head}")
            return 0
        before, after = migrate.upgrade(engine)
    finally:
        engine.dispose()
    if args.json:
        print(json.dumps({"before": before, "after": after}))
    elif before == after:
        print(f"schema already at {after}: nothing to do")
    else:
        print(f"upgraded the results store from {before or 'nothing'} to {after}")
    return 0
