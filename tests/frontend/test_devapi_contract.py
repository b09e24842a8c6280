"""The synthetic API (benchmarks.devapi: front-end development, the front-end benchmark, browser tests
that must not wait on training) checked against the real API's OpenAPI document: every route it answers
exists there with the same query parameters and the same response model; and what it sends validates."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from benchmarks.devapi import DevAPI
from normlab.settings import Settings
from normlab_client.api_models import MetricsPublic, RunList, RunPublic

OPS = ("get", "post", "put", "patch", "delete")


def _ops(doc: dict) -> dict[tuple[str, str], dict]:
    return {(m, path): op for path, ops in doc["paths"].items() for m, op in ops.items() if m in OPS}


def _ok_schema(doc: dict, op: dict) -> dict | None:
    """The 2xx response schema, with its referenced model spelled out (so the two docs compare)."""
    ok = next((v for k, v in op.get("responses", {}).items() if k.startswith("2")), {})
    schema = ok.get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref", "")
    return doc["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else None


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    from backend.app import create_app  # tests may import the API; the front end may not

    real = create_app(Settings(data_dir=tmp_path_factory.mktemp("contract"))).openapi()
    dev = DevAPI(with_frontend=False).app.openapi()
    return real, dev


def test_every_synthetic_route_is_a_real_route_with_the_same_parameters_and_model(docs):
    real, dev = docs
    real_ops, dev_ops = _ops(real), _ops(dev)
    assert set(dev_ops) <= set(real_ops), f"routes the real API lacks: {set(dev_ops) - set(real_ops)}"
    # the pages use every one of these; a route the real API adds need not be faked
    assert {
        ("get", "/api/runs"),
        ("get", "/api/runs/{run_id}"),
        ("get", "/api/runs/{run_id}/metrics"),
        ("post", "/api/runs"),
        ("post", "/api/sweeps"),
        ("get", "/api/invariance"),
        ("get", "/api/events"),
    } <= set(dev_ops)
    for key, op in dev_ops.items():
        params = {(p["in"], p["name"]) for p in op.get("parameters", [])}
        real_params = {(p["in"], p["name"]) for p in real_ops[key].get("parameters", [])}
        assert params <= real_params, (key, params - real_params)
        model = _ok_schema(real, real_ops[key])
        if model is not None:  # the real route names a response model: the synthetic one answers with it
            assert _ok_schema(dev, op) == model, key


def test_what_the_synthetic_api_sends_validates_against_the_shared_models():
    api = DevAPI(rate=200.0, with_frontend=False)
    with TestClient(api.app) as client:
        rid = client.post("/api/runs", json={"task": "digits", "steps": 20, "eval_every": 5}).json()["id"]
        bad = client.post("/api/runs", json={"task": "digits", "norm": "batch", "batch_size": 1})
        assert bad.status_code == 422 and "batch_size" in bad.json()["fields"]
        for _ in range(100):
            run = RunPublic.model_validate(client.get(f"/api/runs/{rid}").json())
            if run.status == "completed":
                break
            time.sleep(0.05)
        assert run.status == "completed" and run.last_seq > 2
        assert RunList.model_validate(client.get("/api/runs").json()).total == 1
        metrics = MetricsPublic.model_validate(client.get(f"/api/runs/{rid}/metrics").json())
        assert metrics.series["train_loss"].step[-1] == 20
        assert client.get("/api/invariance").status_code == 503  # a test sets `api.invariance` to a Table 1
