"""`lab.preset(...).claims` while a preset's seeds land one by one: the client reads `holds` as the API
gives it, None (no verdict either way) until the planned seeds are in. The real API app answers through
an httpx transport, and runs are finished by hand as a worker would (tests/backend/test_groups.py)."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from normlab.settings import Settings
from normlab_client import Client
from tests.backend.test_groups import finish


class _Via(httpx.BaseTransport):
    """Hands each of the client's requests to a TestClient of the app (public httpx and Starlette API)."""

    def __init__(self, tc: TestClient):
        self.tc = tc

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        got = self.tc.request(
            request.method,
            request.url.path,
            params=request.url.params,
            content=request.read(),
            headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
        )
        return httpx.Response(got.status_code, headers=got.headers, content=got.content)


@pytest.fixture
def app(tmp_path):
    return create_app(Settings(data_dir=tmp_path, queue="nlclientlive", max_steps=5000))


def test_the_client_shows_no_verdict_until_the_planned_seeds_are_in(app):
    finals = {"layer": [0.5, 0.52, 0.55, 0.51, 0.5], "none": [0.8, 0.85, 0.9, 0.8, 0.82]}
    with TestClient(app) as tc, Client("http://lab.test", transport=_Via(tc)) as lab:
        group = lab.preset("online", seeds=[0, 1, 2, 3, 4], steps=40)
        runs = {r.id: r.info.spec for r in lab.runs(group=group.id)}
        for seed in range(5):
            for run_id, spec in runs.items():
                if spec.seed == seed:
                    finish(app, run_id, [(20, 2.0), (40, finals[spec.norm][seed])])
            better = next(c for c in group.claims if c.kind == "better")
            if seed < 4:
                assert better.holds is None and better.pending and better.seeds_in == seed + 1
            else:
                assert better.holds is True and not better.pending and better.all_seeds
                assert better.companion is not None and better.companion.wins == 5
