"""Small points of the second attack, each refused or answered properly: a cursor past 32 bits on
PostgreSQL, İ folded the same by both stores, booleans where an intervention takes a number, bidi
controls in a run's name, and the migrations found when the working directory holds a `normlab/`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from normlab.settings import Settings
from normlab.store import Store, get_store
from normlab.store.labels import RunQuery
from normlab.store.store import EventRow

ROOT = Path(__file__).resolve().parents[3]
SPEC = {"task": "digits", "norm": "layer", "steps": 10, "hidden_size": 16}


@pytest.fixture
def pg_store():
    """A PostgreSQL store in a schema of its own, migrated."""
    from normlab.store.migrate import upgrade
    from normlab.store.store import make_engine

    schema = f"nlsp_{uuid.uuid4().hex[:10]}"
    with psycopg.connect("postgresql://127.0.0.1:5432/test", autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"postgresql+psycopg://127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    store = Store(url)
    yield store
    store.dispose()
    with psycopg.connect("postgresql://127.0.0.1:5432/test", autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_cursor_past_32_bits_means_nothing_after_on_postgresql(pg_store):
    pg_store.create_runs([{"id": "r1", "spec": SPEC}])
    row = EventRow(1, 1, "scalars", time.time(), json.dumps({"train_loss": 1.0}))
    pg_store.append_events("r1", [row], [], 1)
    assert [e.seq for e in pg_store.events_after("r1", 0)] == [1]
    for after in (2**31 - 1, 2**31, 10**12):
        assert pg_store.events_after("r1", after) == [], after


@pytest.mark.parametrize("store_kind", ["sqlite", "postgresql"])
def test_dotted_capital_i_folds_the_same_in_both_stores(store_kind, pg_store, tmp_path):
    store = pg_store if store_kind == "postgresql" else get_store(Settings(data_dir=tmp_path))
    store.create_runs([{"id": "tr1", "spec": SPEC}, {"id": "tr2", "spec": SPEC}, {"id": "tr3", "spec": SPEC}])
    store.set_labels("tr1", name="İstanbul LN")
    store.set_labels("tr2", name="istanbul BN")
    store.set_labels("tr3", name="ÉCOLE")

    def found(text: str) -> list[str]:
        rows, _ = store.search_runs(RunQuery(text=text))
        return sorted(r["id"] for r in rows)

    assert found("istanbul") == ["tr1", "tr2"]
    assert found("İSTANBUL") == ["tr1", "tr2"]
    assert found("école") == ["tr3"]


def test_a_boolean_is_not_a_number_for_interventions_or_forks(make_client):
    client = make_client()
    run_id = client.post("/api/runs", json=SPEC).json()["id"]
    for body in ({"lr": True}, {"weight_decay": False}, {"momentum": True}):
        r = client.post(f"/api/runs/{run_id}/interventions", json=body)
        assert r.status_code == 422 and "expected a number" in r.text, (body, r.text)
    r = client.post(f"/api/runs/{run_id}/fork", json={"step": True})
    assert r.status_code == 422 and "expected a number" in r.text, r.text
    spec = {**SPEC, "interventions": [{"step": 2, "lr": True}]}
    r = client.post("/api/runs", json=spec)
    assert r.status_code == 422 and "expected a number" in r.text, r.text


def test_bidi_controls_are_refused_in_names_and_the_document_says_so(make_client):
    from jsonschema import Draft202012Validator

    client = make_client()
    run_id = client.post("/api/runs", json=SPEC).json()["id"]
    doc = client.get("/api/openapi.json").json()
    schema = {"$ref": "#/components/schemas/RunLabels", "components": doc["components"]}
    for name in ("report\u202egpj.exe", "a\u2066b", "x\u200fy", "c1\x85x"):
        r = client.patch(f"/api/runs/{run_id}", json={"name": name})
        assert r.status_code == 422 and "bidirectional" in r.json()["fields"]["name"], (name, r.text)
        assert not Draft202012Validator(schema).is_valid({"name": name}), name
    r = client.patch(f"/api/runs/{run_id}", json={"name": "LN — Ünïcode ok"})
    assert r.status_code == 200 and r.json()["name"] == "LN — Ünïcode ok"


def test_migrations_are_found_with_a_normlab_folder_in_the_working_directory(tmp_path):
    """As under an editable install started from such a folder: `normlab` itself resolves to the
    folder in the working directory (a namespace package), its submodules to the real tree."""
    (tmp_path / "normlab").mkdir()
    code = f"""
import importlib.machinery, sys
class Editable:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if not name.startswith("normlab."):
            return None
        parent = {str(ROOT)!r} + "/" + "/".join(name.split(".")[:-1])
        return importlib.machinery.PathFinder.find_spec(name, [parent])
sys.meta_path.insert(0, Editable)
import normlab
assert normlab.__file__ is None, normlab  # the shadowing folder won
from normlab.store.migrate import upgrade
from normlab.store.store import make_engine
print(upgrade(make_engine("sqlite:///{tmp_path / "store.sqlite"}")))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    newest = sorted(p.name for p in (ROOT / "normlab/migrations/versions").glob("0*.py"))[-1]
    assert newest.removesuffix(".py") in out.stdout, out.stdout
