"""Back up and restore the results store: SQLite through its online-backup API (a consistent copy while
the server runs), PostgreSQL through `pg_dump`'s custom format and `pg_restore`."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from normlab.store.schema import metadata

SQLITE_MAGIC = b"SQLite format 3\x00"
PG_DUMP_MAGIC = b"PGDMP"


class BackupError(RuntimeError):
    """A backup or restore that cannot be done; the message says what to change."""


def _sqlite_path(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise BackupError("an in-memory SQLite store has nothing to back up")
    return Path(database)


def _pg_tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} is not on PATH: install PostgreSQL's client tools (e.g. postgresql-client)"
        )
    return found


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """A URL the PostgreSQL tools read, with the password passed in the environment, not argv."""
    u = make_url(url)
    env = dict(os.environ)
    if u.password:
        env["PGPASSWORD"] = str(u.password)
    return u.set(drivername="postgresql", password=None).render_as_string(hide_password=False), env


def backup(engine: Engine, url: str, path: Path) -> None:
    """Write the store to `path` (a new file): a SQLite database, or a pg_dump custom-format archive."""
    if path.exists():
        raise BackupError(f"{path} exists; give a new file name (a backup never overwrites)")
    path.parent.mkdir(parents=True, exist_ok=True)
    if engine.dialect.name == "sqlite":
        src = sqlite3.connect(_sqlite_path(url))
        dst = sqlite3.connect(path)
        try:
            with dst:
                src.backup(dst)
        finally:
            dst.close()
            src.close()
        return
    with engine.connect() as conn:
        schema = conn.execute(text("SELECT current_schema()")).scalar_one()
    target, env = _libpq(url)
    done = subprocess.run(
        [_pg_tool("pg_dump"), "--format=custom", f"--schema={schema}", f"--file={path}", target],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        path.unlink(missing_ok=True)
        raise BackupError(f"pg_dump failed: {done.stderr.strip()}")


def kind_of(path: Path) -> str:
    """'sqlite' or 'postgresql': what made the backup file."""
    if not path.is_file():
        raise BackupError(f"no backup file at {path}")
    with open(path, "rb") as f:
        head = f.read(16)
    if head == SQLITE_MAGIC:
        return "sqlite"
    if head.startswith(PG_DUMP_MAGIC):
        return "postgresql"
    raise BackupError(f"{path} is not a normlab backup (neither a SQLite database nor a pg_dump archive)")


def restore(engine: Engine, url: str, path: Path) -> None:
    """Replace the store's contents with the backup's (stop the server first)."""
    kind = kind_of(path)
    if kind != engine.dialect.name:
        raise BackupError(
            f"{path} is a {kind} backup and this store is {engine.dialect.name}: restore it into a "
            f"{kind} store (NORMLAB_DATABASE_URL {'unset' if kind == 'sqlite' else 'set'})"
        )
    if kind == "sqlite":
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        if src.execute("SELECT count(*) FROM sqlite_master WHERE name='runs'").fetchone()[0] != 1:
            src.close()
            raise BackupError(f"{path} is a SQLite database but not a normlab store (no runs table)")
        target = _sqlite_path(url)
        target.parent.mkdir(parents=True, exist_ok=True)
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        return
    _restore_pg(engine, url, path)


def _restore_pg(engine: Engine, url: str, path: Path) -> None:
    listed = subprocess.run([_pg_tool("pg_restore"), "--list", str(path)], capture_output=True, text=True)
    if listed.returncode != 0:
        raise BackupError(f"pg_restore cannot read {path}: {listed.stderr.strip()}")
    # TOC lines: "<id>; <oid> <oid> TABLE <schema> <name> <owner>". The archive names the schema it was
    # dumped from; the entries are restored there, so it must be this store's schema.
    dumped = set(re.findall(r"^\d+; \d+ \d+ TABLE (?!DATA )(\S+) ", listed.stdout, re.MULTILINE))
    with engine.connect() as conn:
        schema = conn.execute(text("SELECT current_schema()")).scalar_one()
    if dumped != {schema}:
        raise BackupError(
            f"{path} holds schema {', '.join(sorted(dumped)) or '(none)'}, this store uses {schema}: "
            "point NORMLAB_DATABASE_URL at a database whose search_path is the backup's schema"
        )
    # Every entry but CREATE SCHEMA (the schema is here already), as SQL run in one transaction after
    # dropping the store's tables: a restore that fails leaves the store as it was.
    toc_path = path.with_name(path.name + ".toc")
    toc_path.write_text("\n".join(x for x in listed.stdout.splitlines() if " SCHEMA " not in x) + "\n")
    try:
        sql = subprocess.run(
            [_pg_tool("pg_restore"), "--no-owner", f"--use-list={toc_path}", "--file=-", str(path)],
            capture_output=True,
            text=True,
        )
    finally:
        toc_path.unlink(missing_ok=True)
    if sql.returncode != 0:
        raise BackupError(f"pg_restore failed: {sql.stderr.strip()}")
    drops = "".join(f'DROP TABLE IF EXISTS "{n}" CASCADE;\n' for n in [*metadata.tables, "alembic_version"])
    target, env = _libpq(url)
    done = subprocess.run(
        [_pg_tool("psql"), "--no-psqlrc", "--quiet", "--single-transaction", "-v", "ON_ERROR_STOP=1", target],
        input=drops + sql.stdout,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise BackupError(f"restoring {path} failed, the store is unchanged: {done.stderr.strip()}")
