"""Limits: job size (422 saying what to change), per-user active cap and submission rate (429 with
Retry-After), queue position, request size (413); the parameter estimate against the real models."""

from __future__ import annotations

import pytest

from backend.limits import TASK_DIMS, RateLimiter, estimate_params
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec

SPEC = {"task": "digits", "steps": 20}


def test_job_size_limits_say_what_to_change(make_client):
    client = make_client(max_steps=100, max_params=200_000, max_seq_tokens=1000, min_probe_every=10)
    cases = [
        ({"steps": 101}, "steps", "NORMLAB_MAX_STEPS"),
        ({"hidden_size": 1024}, "hidden_size", "Lower hidden_size or layers"),
        ({"task": "charlm", "seq_len": 100, "batch_size": 32}, "seq_len", "shorten the sequences"),
        ({"probes": {"enabled": True, "fisher_every": 3}}, "probes.fisher_every", "raise it"),
    ]
    for spec, field, words in cases:
        r = client.post("/api/runs", json={**SPEC, **spec})
        assert r.status_code == 422, spec
        assert words in r.json()["fields"][field], r.json()
    # within the limits: accepted (probes every 10 steps is allowed)
    probes = {"enabled": True, "trace_every": 10, "fisher_every": 10}
    r = client.post("/api/runs", json={**SPEC, "hidden_size": 64, "probes": probes})
    assert r.status_code == 201
    assert client.get("/api/me").json()["limits"]["max_params"] == 200_000


def test_active_cap_429_with_retry_after_and_queue_position(make_client, tokens):
    client = make_client(auth="tokens", max_active_runs_per_user=3)
    alice, bob = tokens("alice"), tokens("bob")
    ids = [client.post("/api/runs", json=SPEC, headers=alice).json()["id"] for _ in range(2)]
    client.post("/api/runs", json=SPEC, headers=bob)
    r = client.post("/api/sweeps", json={"base": SPEC, "seeds": [0, 1]}, headers=alice)  # 2 + 2 > 3
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    body = r.json()
    assert "allows 3 per user" in body["detail"] and "NORMLAB_MAX_ACTIVE_RUNS_PER_USER" in body["detail"]
    assert "position 1" in body["detail"]
    assert client.post("/api/runs", json=SPEC, headers=alice).status_code == 201  # 3rd is fine
    assert client.post("/api/runs", json=SPEC, headers=alice).status_code == 429
    assert client.post("/api/runs", json=SPEC, headers=bob).status_code == 201  # bob has his own cap
    # queue positions in the fair order (normlab.fair_queue): users take turns, so bob's first run comes
    # between alice's first and her second
    positions = [client.get(f"/api/runs/{i}").json()["queue_position"] for i in ids]
    assert positions == [1, 3]
    client.post(f"/api/runs/{ids[0]}/cancel", headers=alice)
    assert client.get(f"/api/runs/{ids[1]}").json()["queue_position"] == 1
    assert client.post("/api/runs", json=SPEC, headers=alice).status_code == 201  # a slot was freed


def test_submission_rate_429_with_retry_after(make_client, tokens):
    client = make_client(auth="tokens", submit_rate_per_minute=3, max_active_runs_per_user=100)
    alice, bob = tokens("alice"), tokens("bob")
    for _ in range(3):
        assert client.post("/api/runs", json=SPEC, headers=alice).status_code == 201
    r = client.post("/api/runs", json=SPEC, headers=alice)
    assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
    assert "/api/sweeps" in r.json()["detail"] and "NORMLAB_SUBMIT_RATE_PER_MINUTE" in r.json()["detail"]
    assert client.post("/api/runs", json=SPEC, headers=bob).status_code == 201
    assert client.get("/api/runs", params={"owner": "alice"}).json()["total"] == 3  # the 4th made nothing


def test_rate_window_slides():
    rl = RateLimiter()
    assert [rl.hit("u", 2, now=t) for t in (0.0, 1.0)] == [0.0, 0.0]
    assert rl.hit("u", 2, now=30.0) == pytest.approx(30.0)  # the first one leaves the window at 60 s
    assert rl.hit("u", 2, now=60.5) == 0.0


def test_huge_bodies_get_413_before_parsing(make_client):
    client = make_client(max_body_bytes=4096)
    big = {**SPEC, "pad": "x" * 10_000}
    r = client.post("/api/runs", json=big)
    assert r.status_code == 413 and "NORMLAB_MAX_BODY_BYTES" in r.json()["detail"]

    def chunks():  # no Content-Length: counted as it streams in
        for _ in range(10):
            yield b" " * 1000

    r = client.post("/api/runs", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert client.post("/not-api", content=b" " * 10_000).status_code != 413  # the pages' callbacks
    small = client.post(
        "/api/runs",
        content=iter([b'{"task": "digits",', b' "steps": 5}']),
        headers={"Content-Type": "application/json"},
    )
    assert small.status_code == 201, small.text


def test_parameter_estimate_matches_the_real_models(tmp_path):
    pytest.importorskip("torch")
    from normlab.settings import Settings
    from workers.engine.models import build_model
    from workers.engine.tasks import load_task

    for name, info in TASKS.items():
        data = None
        if name != "mnist":  # no IDX files here; its shape is the paper's 784 -> 10
            data = load_task(RunSpec(task=name).resolved(), Settings(data_dir=tmp_path))
            assert (data.input_dim, data.n_outputs) == TASK_DIMS[name], name
        cells = ["lstm", "gru", "tanh"] if info.kind == "sequence" else [None]
        for cell in cells:
            for norm in [n for n in ("none", "layer", "weight") if n in info.norms]:
                for hidden, layers in ((None, None), (64, 3)):
                    spec = RunSpec(task=name, cell=cell, norm=norm, hidden_size=hidden, layers=layers)
                    spec = spec.resolved()
                    own = name != "mnist" and data.model_fn is not None  # a task that brings its model
                    model = data.model_fn(spec) if own else build_model(spec, info, *TASK_DIMS[name])
                    real = sum(p.numel() for p in model.parameters())
                    assert abs(estimate_params(spec) - real) <= 0.05 * real, (name, cell, norm, hidden)
