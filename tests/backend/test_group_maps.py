"""A map preset launched on the real API and SQLite: GET /api/groups/{id} answers its points, which
fill in as runs end (runs finished by hand through the store's writer, as a worker would)."""

from __future__ import annotations

import math
import statistics

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from normlab.settings import Settings
from tests.backend.test_groups import finish


@pytest.fixture
def app(tmp_path):
    return create_app(Settings(data_dir=tmp_path, queue="nlmaps", max_steps=5000))


def test_a_maps_points_fill_in_as_runs_end(app):
    with TestClient(app) as client:
        r = client.post("/api/presets/map-ln-bn-batch", json={"seeds": [0, 1, 2], "steps": 10})
        assert r.status_code == 201, r.text
        gid = r.json()["group_id"]
        runs = client.get("/api/runs", params={"group": gid, "limit": 100}).json()["items"]
        assert len(runs) == 24
        g = client.get(f"/api/groups/{gid}").json()
        assert g["map"]["axis"] == "batch_size" and g["map"]["claim_side"] == "below"
        assert [p["n"] for p in g["map"]["points"]] == [0, 0, 0, 0]
        assert g["claims"] and not any(c["holds"] for c in g["claims"])

        final = {"layer": [0.30, 0.34, 0.29], "batch": [0.60, 0.50, 0.70]}
        for run in runs:
            spec = run["spec"]
            if spec["batch_size"] == 2:
                finish(app, run["id"], [(5, 2.0), (10, final[spec["norm"]][spec["seed"]])])
        g = client.get(f"/api/groups/{gid}").json()
        points = {p["value"]: p for p in g["map"]["points"]}
        diffs = [x - y for x, y in zip(final["layer"], final["batch"], strict=True)]
        assert points[2]["n"] == 3 and points[2]["difference"] == pytest.approx(statistics.fmean(diffs))
        assert points[2]["se"] == pytest.approx(statistics.stdev(diffs) / math.sqrt(3))
        assert points[2]["favours"] == "a"
        assert all(points[v]["n"] == 0 for v in (4, 16, 128)) and not g["done"]
        at2, at4 = g["claims"]  # the map's own claims at the smallest batches
        assert at2["holds"] and at2["difference"] == pytest.approx(points[2]["difference"])
        assert not at4["holds"]
