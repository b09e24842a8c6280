"""The client on a shared lab server (`normlab up` with PostgreSQL, Redis and NORMLAB_AUTH=tokens,
private reading): nothing without a token, everything with one, the server's 401 message as the error."""

from __future__ import annotations

import uuid

import psycopg
import pytest
import redis

from backend.auth import TokenStore
from benchmarks.service import running_lab
from normlab.store import Store
from normlab_client import Client, NormlabError
from normlab_client.events import RunStatus

pytestmark = pytest.mark.slow
PG = "postgresql://127.0.0.1:5432/test"


@pytest.fixture(scope="module")
def private_lab(tmp_path_factory):
    schema = f"nlc_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    db_url = f"postgresql+psycopg://127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    redis_url = "redis://127.0.0.1:6379/14"
    queue = f"nlclient-{uuid.uuid4().hex[:8]}"
    store = Store(db_url)
    try:
        with running_lab(
            tmp_path_factory.mktemp("private-lab"),
            workers=1,
            database_url=db_url,
            broker_url=redis_url,
            redis_url=redis_url,
            queue=queue,
            auth="tokens",
            public_read="false",
        ) as lab:
            lab.token = TokenStore(store).create("alice")[1]
            yield lab
    finally:
        store.dispose()
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(f"{queue}*"))
        if keys:
            client.delete(*keys)


def test_a_private_server_needs_the_token(private_lab):
    with Client(private_lab.url) as anonymous, pytest.raises(NormlabError) as info:
        anonymous.runs()
    assert info.value.status == 401 and "Reading this server needs an API token" in info.value.message
    with Client(private_lab.url) as anonymous, pytest.raises(NormlabError, match="need an API token"):
        anonymous.submit(task="digits", steps=20)
    with Client(private_lab.url, token="nl_not-a-real-token") as wrong, pytest.raises(NormlabError) as info:
        wrong.runs()
    assert info.value.status == 401 and "unknown or revoked" in info.value.message

    with Client(private_lab.url, token=private_lab.token) as alice:
        run = alice.submit(task="digits", steps=60, hidden_size=16, eval_every=20)
        run.wait(progress=False, timeout=120)
        assert run.status == RunStatus.COMPLETED and run.info.owner == "alice"
        assert [r.id for r in alice.runs(owner="alice")] == [run.id]
        events = list(run.events(live=False))  # the stream too carries the token (as a header)
        assert [e.seq for e in events] == list(range(1, run.info.last_seq + 1))
        df = run.metrics()
        assert len(df) == sum(e.kind == "scalars" for e in events) > 0
        assert df["train_loss"].tolist() == [e.payload["train_loss"] for e in events if e.kind == "scalars"]
    with Client(private_lab.url) as anonymous, pytest.raises(NormlabError) as info:
        anonymous.run(run.id).metrics()
    assert info.value.status == 401
