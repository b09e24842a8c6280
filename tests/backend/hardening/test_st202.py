"""A request the OpenAPI document allows is not refused (schemathesis' positive_data_acceptance, ST202),
for the three cases fuzzing found: a group's `metric`, unknown properties in a sweep, and `steps` above
this server's NORMLAB_MAX_STEPS. Each refusal the API gives is one the served document already states:
the same value is checked against the document (jsonschema) and sent to the API."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from normlab.presets import PRESETS

SMALL = {"task": "digits", "steps": 10, "hidden_size": 16}


def allows(doc: dict, schema: dict, value: Any) -> bool:
    """Whether `value` is valid against `schema` from the served document (its $refs resolved there)."""
    return Draft202012Validator({**schema, "components": doc["components"]}).is_valid(value)


def body_schema(doc: dict, path: str) -> dict:
    return doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


@pytest.fixture
def api(make_client):
    client = make_client(max_steps=500)
    return client, client.get("/api/openapi.json").json()


def test_every_metric_the_document_allows_is_answered_and_others_are_outside_it(api):
    client, doc = api
    group_id = client.post("/api/sweeps", json={"base": SMALL, "seeds": [1, 2]}).json()["group_id"]
    param = next(
        p for p in doc["paths"]["/api/groups/{group_id}"]["get"]["parameters"] if p["name"] == "metric"
    )["schema"]
    allowed = param.get("enum") or []
    assert "val_loss" in allowed and "accuracy" in allowed, param
    for metric in allowed:
        r = client.get(f"/api/groups/{group_id}", params={"metric": metric})
        assert r.status_code == 200, (metric, r.text)
    for metric in ("", "nope"):
        r = client.get(f"/api/groups/{group_id}", params={"metric": metric})
        assert r.status_code == 422 and r.json()["fields"]["metric"], r.text
        assert not allows(doc, param, metric), f"the document allows metric={metric!r}, refused with 422"


def test_a_sweep_with_unknown_properties_is_outside_the_document(api):
    client, doc = api
    schema = body_schema(doc, "/api/sweeps")
    good = {"base": SMALL, "seeds": [1]}
    assert allows(doc, schema, good) and client.post("/api/sweeps", json=good).status_code == 201
    bad = {**good, "zzz": 1}
    r = client.post("/api/sweeps", json=bad)
    assert r.status_code == 422 and "'zzz'" in r.json()["detail"], r.text
    assert not allows(doc, schema, bad), "the document allows an unknown property the API refuses"


def test_steps_above_the_servers_limit_are_outside_the_document(api):
    client, doc = api
    name = next(iter(PRESETS))
    cases = [
        ("/api/runs", "/api/runs", lambda steps: {**SMALL, "steps": steps}),
        ("/api/presets/{name}", f"/api/presets/{name}", lambda steps: {"seeds": [0], "steps": steps}),
    ]
    for doc_path, url, body in cases:
        schema = body_schema(doc, doc_path)
        assert allows(doc, schema, body(500)), doc_path
        r = client.post(url, json=body(500))
        assert r.status_code == 201, (url, r.text)
        assert not allows(doc, schema, body(501)), f"{doc_path}: the document allows steps=501"
        r = client.post(url, json=body(501))
        assert r.status_code == 422 and r.json()["fields"]["steps"], (url, r.text)
