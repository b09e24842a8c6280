"""The HTTP API in-process (no worker): validation messages, runs, cancel, metrics, export, delete,
SSE of finished runs, errors. Live streaming with real workers is in test_e2e.py."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from backend.app import create_app
from normlab.feed.writer import EventWriter
from normlab.presets import PRESETS
from normlab.settings import Settings
from normlab_client.events import Event


@pytest.fixture
def app(tmp_path):
    return create_app(Settings(data_dir=tmp_path, queue="nlapi", max_steps=5000))


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


def submit(client, **spec) -> str:
    r = client.post("/api/runs", json={"task": "digits", "steps": 20, **spec})
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "queued"
    return r.json()["id"]


def test_a_bad_transformer_layernorm_position_gets_422_saying_what_to_use(client):
    r = client.post("/api/runs", json={"task": "reverse", "ln_position": "middle"})
    assert r.status_code == 422 and "'pre' or 'post'" in r.json()["fields"]["ln_position"]
    r = client.post("/api/runs", json={"task": "digits", "ln_position": "post"})
    assert r.status_code == 422 and "has no Transformer" in r.json()["fields"]["ln_position"]
    assert "reverse" in r.json()["fields"]["ln_position"]


def test_bad_specs_get_422_with_the_specs_messages(client):
    r = client.post("/api/runs", json={"task": "digits", "norm": "batch", "batch_size": 1})
    assert r.status_code == 422
    body = r.json()
    assert "BatchNorm needs batch size ≥ 2" in body["fields"]["batch_size"]
    assert "BatchNorm" in body["detail"]
    r = client.post("/api/runs", json={"task": "digits", "cell": "gru", "seq_len": 9})
    assert set(r.json()["fields"]) == {"cell", "seq_len"}
    assert "not sequential" in r.json()["fields"]["seq_len"]
    r = client.post("/api/runs", json={"task": "digits", "steps": 0, "lr": -1})
    assert r.status_code == 422 and set(r.json()["fields"]) == {"steps", "lr"}
    r = client.post("/api/runs", json={"task": "nope"})
    assert r.status_code == 422 and "task" in r.json()["fields"]
    r = client.post("/api/runs", json={"task": "digits", "steps": 6000})  # this server's limit
    assert r.status_code == 422 and "NORMLAB_MAX_STEPS" in r.json()["fields"]["steps"]
    r = client.post("/api/sweeps", json={"base": {"task": "digits"}, "norms": ["batch"], "batch_sizes": [1]})
    assert r.status_code == 422 and "batch_size=1" in r.json()["detail"]
    r = client.post("/api/runs", content=b"{'task': 'digits'}", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["fields"]["body"]
    r = client.post("/api/runs", content=b"", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "no body" in r.json()["fields"]["body"]
    for lr in ("NaN", "inf", "-Infinity"):
        r = client.post("/api/runs", json={"task": "digits", "lr": lr})
        assert r.status_code == 422 and "finite number" in r.json()["fields"]["lr"], r.text
    r = client.post("/api/runs", json={"task": "nan"})  # not a number field: the choices, as before
    assert r.status_code == 422 and "'digits'" in r.json()["fields"]["task"]
    r = client.post("/api/sweeps", json={"base": {"task": "digits"}, "norms": ["layer", "none", "layer"]})
    assert r.status_code == 422 and r.json()["fields"]["norms"] == (
        "lists 'layer' more than once; give each value once"
    )
    r = client.get("/api/runs", params={"status": "done"})  # a filter that can match nothing is a mistake
    assert r.status_code == 422 and "'completed'" in r.json()["fields"]["status"]
    assert client.get("/api/runs").json()["total"] == 0  # nothing half-created


def test_runs_list_get_queue_position_and_cancel_queued(client):
    a, b = submit(client), submit(client, norm="batch")
    runs = client.get("/api/runs").json()
    assert [r["id"] for r in runs["items"]] == [b, a] and runs["total"] == 2
    assert client.get(f"/api/runs/{a}").json()["queue_position"] == 1
    assert client.get(f"/api/runs/{b}").json()["queue_position"] == 2
    assert [r["id"] for r in client.get("/api/runs", params={"norm": "batch"}).json()["items"]] == [b]
    page = client.get("/api/runs", params={"offset": 1, "limit": 1}).json()
    assert [r["id"] for r in page["items"]] == [a]
    spec = client.get(f"/api/runs/{a}").json()["spec"]
    assert spec["hidden_size"] == 256 and spec["lr"] == 0.001  # the resolved spec is stored

    r = client.post(f"/api/runs/{a}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert client.get(f"/api/runs/{b}").json()["queue_position"] == 1
    with client.stream("GET", f"/api/runs/{a}/events") as resp:
        text = resp.read().decode()
    assert "event: status" in text and '"status":"cancelled"' in text and "id: 1" in text
    assert client.get(f"/api/runs/{a}/events", headers={"Last-Event-ID": "1"}).status_code == 204
    assert client.get("/api/events", params={"runs": a, "after": f"{a}:1"}).status_code == 204


def test_sweep_creates_a_group(client):
    r = client.post(
        "/api/sweeps",
        json={"base": {"task": "digits", "steps": 10}, "norms": ["layer", "batch"], "seeds": [0, 1]},
    )
    assert r.status_code == 201
    body = r.json()
    assert len(body["run_ids"]) == 4
    group = client.get("/api/runs", params={"group": body["group_id"]}).json()
    assert sorted(r["id"] for r in group["items"]) == sorted(body["run_ids"])
    assert {(r["spec"]["norm"], r["spec"]["seed"]) for r in group["items"]} == {
        ("layer", 0),
        ("layer", 1),
        ("batch", 0),
        ("batch", 1),
    }


def _train_by_hand(app, run_id: str, n: int) -> list[dict]:
    store = app.state.store
    store.claim(run_id)
    w = EventWriter(store, run_id)
    w.emit(Event(seq=1, step=0, kind="status", payload={"status": "running"}))
    pts = []
    for i in range(n):
        p = {
            "train_loss": 1.0 / (i + 1),
            "val_loss": None,
            "accuracy": None,
            "bpc": None,
            "grad_norm": 0.5,
            "lr": 0.001,
            "steps_per_s": 100.0,
            "elapsed": i * 0.01,
        }
        pts.append(p)
        w.emit(Event(seq=i + 2, step=i + 1, kind="scalars", payload=p))
    w.close({"status": "completed", "finished_at": time.time()}, {"status": "completed", "time": time.time()})
    return pts


def test_metrics_export_and_delete(app, client):
    run_id = submit(client)
    pts = _train_by_hand(app, run_id, 50)
    m = client.get(f"/api/runs/{run_id}/metrics", params={"names": "train_loss", "max_points": 20}).json()
    assert m["downsampled"] and m["total_points"] == 50 and list(m["series"]) == ["train_loss"]
    assert len(m["series"]["train_loss"]["step"]) == 13  # buckets of 4: 12 full + the tail of 2
    assert m["series"]["train_loss"]["max"][0] == 1.0
    r = client.get(f"/api/runs/{run_id}/metrics", params={"names": "loss"})
    assert r.status_code == 422 and "train_loss" in r.json()["detail"]

    text = client.get(f"/api/runs/{run_id}/export", params={"format": "csv"}).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [float(r["train_loss"]) for r in rows] == [p["train_loss"] for p in pts]
    dump = client.get(f"/api/runs/{run_id}/export", params={"format": "json"})
    assert 'filename="normlab-' in dump.headers["content-disposition"]
    assert [e["seq"] for e in dump.json()["events"]] == list(range(1, 53))
    assert client.get(f"/api/runs/{run_id}/export", params={"format": "../etc"}).status_code == 422

    assert client.delete(f"/api/runs/{run_id}").status_code == 204
    assert client.get(f"/api/runs/{run_id}").status_code == 404


def test_running_run_cannot_be_deleted_and_cancel_sets_the_flag(app, client):
    run_id = submit(client)
    app.state.store.claim(run_id)
    assert client.delete(f"/api/runs/{run_id}").status_code == 409
    assert client.post(f"/api/runs/{run_id}/cancel").json()["status"] == "running"
    assert app.state.store.cancel_requested(run_id)


def test_errors_unknown_ids_bad_cursors_and_database_outage(app, client, monkeypatch):
    assert client.get("/api/runs/doesnotexist").status_code == 404
    assert client.get("/api/runs/" + "x" * 300).status_code == 404
    assert client.post("/api/runs/abc/cancel").json()["detail"].startswith("No run with id")
    run_id = submit(client)
    r = client.get(f"/api/runs/{run_id}/events", headers={"Last-Event-ID": "abc"})
    assert r.status_code == 400 and "sequence number" in r.json()["detail"]
    assert client.get("/api/events", params={"runs": run_id, "after": "zz"}).status_code == 400
    assert client.get("/api/events", params={"runs": ""}).status_code == 400

    def down(*_a, **_k):
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    monkeypatch.setattr(app.state.store, "get_run", down)
    r = client.get(f"/api/runs/{run_id}")
    assert r.status_code == 503 and "unavailable" in r.json()["detail"] and r.headers["retry-after"]


def test_health_catalog_presets_and_docs(client):
    h = client.get("/api/health").json()
    assert h.pop("checkpoint_free_bytes") > 0  # the checkpoint folder's disk (tests: this machine's)
    assert h == {
        "status": "ok",
        "database": "sqlite",
        "feed": "embedded",
        "broker": "filesystem",
        "broker_reachable": True,
        "workers": None,  # only `normlab up` starts (and reports) workers
        "problems": [],
        "auth": "off",
    }
    cat = client.get("/api/catalog").json()
    assert {t["name"] for t in cat["tasks"]} >= {"digits", "charlm"} and "layer" in cat["norms"]
    # the ranges a form shows are this server's: max_steps=5000 here, probes at most every 5 steps
    assert cat["fields"]["steps"]["anyOf"][0]["maximum"] == 5000
    assert cat["fields"]["probes"]["fisher_every"]["minimum"] == 5
    assert cat["fields"]["batch_size"]["maximum"] == 4096
    assert [p["name"] for p in client.get("/api/presets").json()] == list(PRESETS)
    assert client.get("/api/docs").status_code == 200
    assert "/api/runs/{run_id}/events" in client.get("/api/openapi.json").json()["paths"]


def test_api_never_imports_torch():
    code = (
        "import sys, tempfile; from backend.app import create_app; from normlab.settings import Settings;"
        "create_app(Settings(data_dir=tempfile.mkdtemp()));"
        "import normlab.queue; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_invariance_is_the_build_time_table_served_without_torch(client):
    # the table the engine computed at build time (tests/workers/engine/test_table1_computed.py recomputes it)
    from importlib import resources

    r = client.get("/api/invariance")
    assert r.status_code == 200
    table = r.json()
    assert table == json.loads(resources.files("normlab").joinpath("table1.json").read_text())
    assert table["methods"]["layer"]["single_training_case_rescaling"] is True
    assert table["methods"]["batch"]["single_training_case_rescaling"] is False
    code = (
        "import sys, tempfile; from fastapi.testclient import TestClient; from backend.app import create_app;"
        "from normlab.settings import Settings;"
        "c = TestClient(create_app(Settings(data_dir=tempfile.mkdtemp())));"
        "assert c.get('/api/invariance').status_code == 200;"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
