"""A fresh, empty database per test on each store: a SQLite file, or a PostgreSQL schema of its own."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from sqlalchemy import Engine

from normlab.store.store import make_engine

PG_BASE = "postgresql://127.0.0.1:5432/test"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """The URL of an empty database (SQLite file under tmp_path, or a new PostgreSQL schema)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'normlab.sqlite'}"
        return
    schema = f"nl_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_BASE, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as exc:  # pragma: no cover - the machine always runs it
        pytest.fail(f"PostgreSQL is not running on 127.0.0.1:5432 ({exc}); bash scripts/test starts it")
    yield f"postgresql+psycopg://127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def engine(db_url) -> Engine:
    e = make_engine(db_url)
    yield e
    e.dispose()
