"""Schemathesis against /api/openapi.json, in-process (ASGI): at least 1,000 generated requests, valid
and invalid (positive and negative generation), and not one answer with status 5xx."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from backend.app import create_app
from normlab.settings import Settings

# Per operation and generation mode: up to 16 operations × 2 modes × 60 requests with auth off; a
# shorter pass with NORMLAB_AUTH=tokens and private reading (mostly the 401 paths).
EXAMPLES = {"off": 60, "tokens": 15}
MIN_REQUESTS = {"off": 1000, "tokens": 250}


def _request_kwargs(case) -> dict:
    kw = case.as_transport_kwargs()
    out = {
        "method": kw["method"],
        "url": kw["url"],
        "headers": kw.get("headers") or {},
        "params": kw.get("params") or {},
        "cookies": kw.get("cookies") or {},
    }
    if "json" in kw:
        out["content"] = json.dumps(kw["json"]).encode()
    elif kw.get("data") is not None:
        data = kw["data"]
        out["content"] = data if isinstance(data, bytes) else str(data).encode()
    return out


@pytest.mark.parametrize("auth", ["off", "tokens"])
def test_no_5xx_over_1000_generated_requests(tmp_path, auth):
    app = create_app(Settings(data_dir=tmp_path, queue=f"fuzz{auth}", auth=auth, public_read=False))
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", app)
    statuses: Counter = Counter()
    failures: list[str] = []
    with TestClient(app, raise_server_exceptions=False) as client:
        for result in schema.get_all_operations():
            op = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _fuzz(client, op, mode, EXAMPLES[auth], statuses, failures)
    total = sum(statuses.values())
    assert not failures, "\n".join(failures[:20])
    # Operations without parameters have no invalid request to send: fewer than 2 modes × EXAMPLES each.
    assert total >= MIN_REQUESTS[auth], statuses
    assert not failures, "\n".join(failures[:20])
    if auth == "off":
        assert statuses[422] > 0 and statuses[201] > 0  # both invalid and valid requests were sent
    else:
        assert statuses[401] > 0 and statuses[200] > 0  # refused without a token; health and /api/me open


def _fuzz(client, op, mode, examples: int, statuses: Counter, failures: list[str]) -> None:
    @hyp_settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(mode))
    def call(case):
        kw = _request_kwargs(case)
        r = client.request(timeout=10, **kw)
        statuses[r.status_code] += 1
        if r.status_code >= 500:
            failures.append(
                f"{op.method.upper()} {kw['url']} {kw['params']} ({mode.value}) -> "
                f"{r.status_code}: {r.text[:200]}"
            )

    try:
        call()
    except Unsatisfiable:  # an operation without parameters or body has no invalid request to send
        assert mode == GenerationMode.NEGATIVE, f"{op.method.upper()} {op.path}: nothing valid to send"
