"""Migrations: a store written by the first release keeps every run, event, roll-up, group and token
through `normlab db upgrade` on SQLite and PostgreSQL; an out-of-date store is refused with a message
naming that command; a new store is born at the head, with exactly the tables the revisions build."""

from __future__ import annotations

import json
import socket

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import select

from backend.auth import TokenStore
from normlab.cli import main
from normlab.store import Store, migrate
from normlab.store.schema import cache, events, metadata, rollups, runs
from tests.normlab.store.release_0001 import TOKEN, make_release_store


def _env(monkeypatch, tmp_path, db_url: str) -> None:
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    if not db_url.startswith("sqlite"):
        monkeypatch.setenv("NORMLAB_DATABASE_URL", db_url)


def test_release_store_keeps_everything_through_the_upgrade(engine, db_url, tmp_path, monkeypatch, capsys):
    written = make_release_store(engine)
    assert migrate.state(engine).current == migrate.FIRST_REVISION

    _env(monkeypatch, tmp_path, db_url)
    assert main(["db", "upgrade"]) == 0
    assert f"from {migrate.FIRST_REVISION} to {migrate.head_revision()}" in capsys.readouterr().out
    assert migrate.state(engine).up_to_date

    store = Store(db_url)
    try:
        with store.engine.connect() as conn:
            kept_runs = [dict(r) for r in conn.execute(select(runs).order_by(runs.c.id)).mappings()]
            kept_events = [
                dict(r)
                for r in conn.execute(select(events).order_by(events.c.run_id, events.c.seq)).mappings()
            ]
            kept_rollups = [dict(r) for r in conn.execute(select(rollups)).mappings()]
            cache_keys = set(conn.execute(select(cache.c.key)).scalars())
        for old, new in zip(written["runs"], kept_runs, strict=True):
            assert {k: new[k] for k in old} == old
            assert new["name"] is None and new["note"] is None
        assert kept_events == written["events"]
        assert kept_rollups == written["rollups"]
        # Groups moved out of the cache into their table; other cache entries stay.
        assert cache_keys == {"invariance"}
        for gid, meta in written["groups"].items():
            group = store.get_group(gid)
            assert group is not None and group.kind == meta["kind"]
            dumped = group.meta.model_dump()
            assert {k: dumped[k] for k in meta} == meta
            # fields added since (a preset's swap, a fresh draw) read as their defaults
            fields = type(group.meta).model_fields
            assert {k: v for k, v in dumped.items() if k not in meta} == {
                k: fields[k].get_default(call_default_factory=True) for k in dumped if k not in meta
            }
            assert group.created_at == 1_700_000_100.0
        assert store.get_group("grp000000001").preset == "fig6-batch4"
        # The store's own readers see the old rows.
        run, total = store.list_runs(group="grp000000001")
        assert total == 2 and {r["id"] for r in run} == {"run000000000", "run000000001"}
        assert [e.seq for e in store.events_after("run000000002", 0)] == [1, 2, 3]
        # The token still signs its user in.
        who = TokenStore(store).check(TOKEN)
        assert who is not None and who.name == "ada" and who.admin
    finally:
        store.dispose()

    assert main(["db", "upgrade"]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_an_out_of_date_store_is_refused_naming_the_upgrade_command(engine, db_url, tmp_path, monkeypatch):
    make_release_store(engine)
    with pytest.raises(migrate.SchemaOutOfDate, match="normlab db upgrade"):
        Store(db_url)
    with engine.connect() as conn:  # refusing changed nothing
        assert conn.execute(select(runs.c.id).where(runs.c.id == "run000000000")).scalar_one()
        assert MigrationContext.configure(conn).get_current_heads() == ()


@pytest.mark.parametrize("command", ["up", "api", "token"])
def test_serving_an_old_store_is_a_cli_message_naming_the_command(tmp_path, monkeypatch, capsys, command):
    from normlab.store.store import make_engine

    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    engine = make_engine(f"sqlite:///{tmp_path / 'normlab.sqlite'}")
    make_release_store(engine)
    engine.dispose()
    with socket.socket() as s:  # a free port: the refusal must come from the schema, not the port
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    argv = {"up": ["up", "--port", port, "--workers", "0"], "api": ["api", "--port", port]}.get(
        command, ["token", "list"]
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "normlab db upgrade" in err and "Traceback" not in err
    assert not (tmp_path / "logs").exists()  # `up` refused before starting any worker


def test_a_new_store_has_exactly_the_tables_the_revisions_build(engine, db_url):
    """create_all + stamp (how a new store starts) and the revisions one by one give the same schema."""
    before, after = migrate.upgrade(engine)  # empty: created at head
    assert before is None and after == migrate.head_revision()
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    # The same through every revision from nothing: downgrade to the base, then upgrade step by step.
    from alembic import command

    with engine.connect() as conn:
        command.downgrade(migrate.alembic_config(conn), "base")
        conn.commit()
        assert migrate.current_revision(conn) is None
        command.upgrade(migrate.alembic_config(conn), "head")
        conn.commit()
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []


def test_groups_survive_a_downgrade_and_upgrade(engine):
    make_release_store(engine)
    migrate.upgrade(engine)
    from alembic import command

    with engine.connect() as conn:
        command.downgrade(migrate.alembic_config(conn), migrate.FIRST_REVISION)
        conn.commit()
        value = conn.execute(select(cache.c.value).where(cache.c.key == "group:grp000000002")).scalar_one()
    assert json.loads(value) == {"kind": "sweep", "varied": ["norm"]}
    assert migrate.upgrade(engine)[1] == migrate.head_revision()
