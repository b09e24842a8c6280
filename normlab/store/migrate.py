"""The store's schema version: create a new store at the head revision, upgrade an old one in place
(`normlab db upgrade`), and refuse to open one that is out of date.

A database made before migrations existed has the first release's tables and no alembic_version table;
it counts as revision 0001_release. Creating and upgrading run under a lock (a file lock beside a SQLite
database, an advisory lock on PostgreSQL) so processes starting together on an empty store, or two
upgrades, do not race.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from normlab.store.schema import metadata

FIRST_REVISION = "0001_release"
UPGRADE_COMMAND = "normlab db upgrade"
_PG_LOCK_KEY = 0x6E6C6162  # any constant shared by every normlab process


class SchemaOutOfDate(RuntimeError):
    """The database's schema is older (or newer) than this normlab's; the message says what to run."""


@dataclass(frozen=True)
class SchemaState:
    current: str | None  # None: an empty database
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    # the folder beside this package's files: "normlab:migrations" would be looked up through the
    # `normlab` package, which a folder of that name in the working directory can shadow
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "normlab/migrations/versions has no revision"
    return head


def current_revision(conn: Connection) -> str | None:
    """The database's revision: None when it has no tables of ours, 0001_release for a pre-migration one."""
    heads = MigrationContext.configure(conn).get_current_heads()
    if heads:
        return heads[0]
    return FIRST_REVISION if inspect(conn).has_table("runs") else None


def state(engine: Engine) -> SchemaState:
    with engine.connect() as conn:
        return SchemaState(current_revision(conn), head_revision())


@contextlib.contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A connection holding the schema lock (processes that start together on one store wait here)."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            conn.commit()
            try:
                yield conn
            finally:
                conn.rollback()
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                conn.commit()
        return
    database = engine.url.database
    if not database or database == ":memory:":
        with engine.connect() as conn:
            yield conn
        return
    with open(Path(database).with_name(Path(database).name + ".schema-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with engine.connect() as conn:
                yield conn
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _create_at_head(conn: Connection) -> None:
    # A new store is born at the head in one step; the revisions' sum equals `metadata` (a test checks).
    metadata.create_all(conn)
    MigrationContext.configure(conn).stamp(ScriptDirectory.from_config(alembic_config()), "head")
    conn.commit()


def ensure_current(engine: Engine) -> None:
    """Create the tables of an empty database; raise SchemaOutOfDate when an existing one is not at head."""
    st = state(engine)
    if st.up_to_date:
        return
    if st.current is None:
        with _locked(engine) as conn:
            if current_revision(conn) is None:
                _create_at_head(conn)
        st = state(engine)
        if st.up_to_date:
            return
    raise SchemaOutOfDate(out_of_date_message(st))


def out_of_date_message(st: SchemaState) -> str:
    known = {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if st.current not in known:
        return (
            f"the results store is at schema revision {st.current}, which this normlab does not know "
            f"(its newest is {st.head}): a newer normlab wrote it; upgrade normlab itself"
        )
    return (
        f"the results store's schema is at revision {st.current}, this normlab needs {st.head}: back it "
        f"up (normlab backup PATH), then run `{UPGRADE_COMMAND}` with the same NORMLAB_DATABASE_URL or "
        "--data-dir"
    )


def upgrade(engine: Engine, to: str = "head") -> tuple[str | None, str]:
    """Upgrade the database in place under the schema lock; returns (revision before, revision after)."""
    with _locked(engine) as conn:
        before = current_revision(conn)
        if before is None:
            _create_at_head(conn)
        else:
            if not MigrationContext.configure(conn).get_current_heads():
                # A pre-migration store: record the revision its tables are at, then go on from there.
                MigrationContext.configure(conn).stamp(
                    ScriptDirectory.from_config(alembic_config()), FIRST_REVISION
                )
                conn.commit()
            command.upgrade(alembic_config(conn), to)
            conn.commit()
        after = current_revision(conn)
    return before, after or "none"
