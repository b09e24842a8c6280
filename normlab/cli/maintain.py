"""`normlab gc --older-than 90d [--keep-tagged] [--dry-run]`, `normlab backup PATH`,
`normlab restore PATH`: keeping a lab server's store over months (docs/lab-server.md)."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normlab.cli import CLIError, settings_from

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from normlab.cli import Subcommands

UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400}


def register(sub: Subcommands) -> None:
    p = sub.add_parser("gc", help="delete old ended runs with their events and checkpoints")
    p.add_argument(
        "--older-than", required=True, metavar="AGE", help="e.g. 90d, 12w or 48h: ended before then"
    )
    p.add_argument("--keep-tagged", action="store_true", help="keep every run that has a tag")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    _store_args(p)
    p.set_defaults(func=cmd_gc)

    p = sub.add_parser("backup", help="copy the results store to a new file (safe while the server runs)")
    p.add_argument("path", help="the new file: a SQLite database, or a pg_dump archive for PostgreSQL")
    _store_args(p)
    p.set_defaults(func=cmd_backup)

    p = sub.add_parser(
        "restore",
        help="replace the results store's contents with a backup (refused while a server or worker uses it)",
    )
    p.add_argument("path", help="a file written by `normlab backup`")
    p.add_argument(
        "--force",
        action="store_true",
        help="restore although a server or worker is using the store (what they write after it for runs "
        "the backup lacks is removed)",
    )
    _store_args(p)
    p.set_defaults(func=cmd_restore)


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=None, help="the SQLite store's folder (default ~/.normlab)")
    p.add_argument("--json", action="store_true", help="print JSON")


def parse_age(text: str) -> float:
    """Seconds in an age like 90d, 12w or 48h."""
    m = re.fullmatch(r"\s*(\d{1,5})\s*([hdw])\s*", text)
    if m is None:
        raise CLIError(f"--older-than {text!r}: give a number and a unit h, d or w, e.g. 90d")
    return int(m.group(1)) * UNITS[m.group(2)]


def cmd_gc(args: argparse.Namespace) -> int:
    from normlab import checkpoints
    from normlab.store import get_store, lineage

    age = parse_age(args.older_than)
    settings = settings_from(args)
    store = get_store(settings)
    old: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for run in store.old_runs(time.time() - age, keep_tagged=args.keep_tagged):
        # a queued or running fork still needs this run's checkpoints: the run stays, and gc says why
        forks = lineage.active_children(store, run["id"])
        (kept if forks else old).append({**run, "forks": [c["id"] for c in forks]} if forks else run)
    deleted, swept = 0, (0, 0)
    if not args.dry_run:
        # partial checkpoint files a killed writer left (of any run): retention only sweeps a run it writes
        swept = checkpoints.sweep_all(settings.checkpoint_root)
        for run in old:
            # What DELETE /api/runs/{id} removes: the run with its events, roll-ups and tags, its
            # checkpoints (files under the checkpoint root) and its place in the fork tree.
            deleted += store.delete_run(run["id"])
            checkpoints.delete_run(settings.checkpoint_root, run["id"])
            lineage.forget(store, run["id"])
    if args.json:
        stale = {"files": swept[0], "bytes": swept[1]}
        print(
            json.dumps(
                {"dry_run": args.dry_run, "runs": old, "deleted": deleted, "kept": kept, "swept": stale}
            )
        )
        return 0
    for run in old:
        when = time.strftime("%Y-%m-%d", time.gmtime(run["created_at"]))
        print(f"{run['id']}  {when}  {run['status']:<9} {run['owner'] or '-':<16} {run['name'] or ''}")
    for run in kept:
        print(
            f"{run['id']}  kept: its fork(s) {', '.join(run['forks'])} (queued or running) start from its "
            "checkpoints; it goes in a later gc once they end"
        )
    if swept[0]:
        print(f"swept {swept[0]} partial checkpoint file(s) left by killed writers ({swept[1]} bytes)")
    verb = "would delete" if args.dry_run else "deleted"
    n = len(old) if args.dry_run else deleted
    print(f"{verb} {n} run(s) that ended more than {args.older_than} ago")
    return 0


def _store_engine(args: argparse.Namespace) -> tuple[Engine, str]:
    from normlab.store.store import make_engine

    settings = settings_from(args)
    url = settings.resolved_database_url
    return make_engine(url), url


def cmd_backup(args: argparse.Namespace) -> int:
    from normlab.store.backup import BackupError, backup

    engine, url = _store_engine(args)
    path = Path(args.path).expanduser().resolve()
    try:
        backup(engine, url, path)
    except BackupError as exc:
        raise CLIError(str(exc)) from exc
    finally:
        engine.dispose()
    size = path.stat().st_size
    print(
        json.dumps({"path": str(path), "bytes": size}) if args.json else f"backed up to {path} ({size} bytes)"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from normlab.store import get_store, migrate, presence
    from normlab.store.backup import BackupError, restore

    settings = settings_from(args)
    store = get_store(settings)
    using = presence.in_use(store, settings.lost_after_s)
    if using and not args.force:
        raise CLIError(
            "the store is in use by "
            + "; ".join(using)
            + ". Stop the server and its workers first (a restore under them loses their runs and leaves "
            "rows and checkpoints of runs the backup lacks), or pass --force."
        )
    engine, url = _store_engine(args)
    path = Path(args.path).expanduser().resolve()
    try:
        restore(engine, url, path)
        st = migrate.state(engine)
    except BackupError as exc:
        raise CLIError(str(exc)) from exc
    finally:
        engine.dispose()
    # runs the backup lacks: their rows and checkpoints go, now and (run `normlab gc` later) after the
    # processes still running have stopped writing them
    removed = presence.remove_orphans(store, settings.checkpoint_root)
    if args.json:
        out = {"path": str(path), "revision": st.current, "up_to_date": st.up_to_date, "removed": removed}
        print(json.dumps(out))
        return 0
    print(f"restored {path} (schema {st.current})")
    if any(removed.values()):
        print(
            "removed what belonged to runs the backup lacks: "
            + ", ".join(f"{n} {k}" for k, n in removed.items())
        )
    if not st.up_to_date:
        print(f"the backup's schema is older than this normlab's: run `{migrate.UPGRADE_COMMAND}` next")
    return 0
