"""POST /api/presets/{name} and GET /api/groups/{id} on the real API and SQLite (runs finished by hand
through the store's writer, as a worker would): arms, bands and claims computed by normlab.claims."""

from __future__ import annotations

import json
import math
import statistics
import time

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from normlab.feed.writer import EventWriter
from normlab.presets import PRESETS
from normlab.settings import Settings
from normlab_client.events import Event


@pytest.fixture
def app(tmp_path):
    return create_app(Settings(data_dir=tmp_path, queue="nlpresets", max_steps=5000))


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


def finish(app, run_id: str, curve: list[tuple[int, float]], probes: dict | None = None) -> None:
    """Train a run by hand: running, a scalars event per curve point (val_loss), completed with a summary."""
    store = app.state.store
    store.claim(run_id)
    w = EventWriter(store, run_id)
    w.emit(Event(seq=1, step=0, kind="status", payload={"status": "running"}))
    for i, (step, value) in enumerate(curve):
        w.emit(Event(seq=i + 2, step=step, kind="scalars", payload={"train_loss": value, "val_loss": value}))
    summary = {
        "metrics": {"val_loss": curve[-1][1]},
        "probes": probes,
        "wall_time": 1.0,
        "step": curve[-1][0],
    }
    w.close(
        {"status": "completed", "finished_at": time.time(), "summary": json.dumps(summary)},
        {"status": "completed", "time": time.time()},
    )


def test_preset_launch_makes_one_group_and_its_verdict_fills_in_as_runs_finish(app, client):
    r = client.post("/api/presets/fig6-batch4", json={"seeds": [0, 1, 2], "steps": 10})
    assert r.status_code == 201, r.text
    body = r.json()
    assert len(body["run_ids"]) == 6
    runs = {x["id"]: x for x in client.get("/api/runs", params={"group": body["group_id"]}).json()["items"]}
    assert set(runs) == set(body["run_ids"]) and all(x["spec"]["steps"] == 10 for x in runs.values())
    assert {x["spec"]["bn_variance"] for x in runs.values() if x["spec"]["norm"] == "batch"} == {"unbiased"}

    g = client.get(f"/api/groups/{body['group_id']}").json()
    assert g["kind"] == "preset" and g["preset"] == "fig6-batch4" and g["counts"] == {"queued": 6}
    assert not g["done"] and [c["label"] for c in g["arms"]] == ["batch", "layer"]
    assert all(c["n"] == 0 for c in g["arms"])
    assert g["claims"] and not any(c["holds"] for c in g["claims"])  # nothing finished: nothing holds yet
    # ... and nothing fails either: every seed-judged claim waits for its seeds
    assert all(c["pending"] and c["seeds_expected"] == 3 for c in g["claims"] if c["kind"] != "refused")
    # any browser finds the preset's latest launch (the Presets page after a fresh start)
    latest = {p["name"]: p["latest_group"] for p in client.get("/api/presets").json()}
    assert latest["fig6-batch4"] == body["group_id"] and latest["online"] is None

    finals = {
        ("batch", 0): 0.9,
        ("batch", 1): 0.8,
        ("batch", 2): 1.0,
        ("layer", 0): 0.5,
        ("layer", 1): 0.6,
        ("layer", 2): 0.55,
    }
    by_id = {x["id"]: (x["spec"]["norm"], x["spec"]["seed"]) for x in runs.values()}
    for run_id, key in by_id.items():
        if key[1] == 0:
            finish(app, run_id, [(5, 2.0), (10, finals[key])])
    g = client.get(f"/api/groups/{body['group_id']}").json()
    assert g["counts"] == {"completed": 2, "queued": 4} and [c["n"] for c in g["arms"]] == [1, 1]
    for run_id, key in by_id.items():
        if key[1] != 0:
            finish(app, run_id, [(5, 2.0 + key[1]), (10, finals[key])])
    g = client.get(f"/api/groups/{body['group_id']}").json()
    assert g["done"] and g["counts"] == {"completed": 6}
    arms = {c["label"]: c for c in g["arms"]}
    layer = [finals["layer", s] for s in range(3)]
    batch = [finals["batch", s] for s in range(3)]
    assert arms["layer"]["values"] == layer and arms["layer"]["n"] == 3
    assert arms["layer"]["mean"] == pytest.approx(statistics.fmean(layer))
    assert arms["layer"]["std"] == pytest.approx(statistics.stdev(layer))
    band = arms["layer"]["curve"]
    assert band["steps"] == [5, 10] and band["mean"] == pytest.approx([3.0, statistics.fmean(layer)])
    assert band["std"] == pytest.approx([1.0, statistics.stdev(layer)])
    better = next(c for c in g["claims"] if c["kind"] == "better")
    diffs = [x - y for x, y in zip(layer, batch, strict=True)]
    assert better["claim"] == "layer better than batch" and better["holds"] and better["all_seeds"]
    assert better["difference"] == pytest.approx(statistics.fmean(diffs)) and better["n"] == 3
    assert better["se"] == pytest.approx(statistics.stdev(diffs) / math.sqrt(3))
    assert (
        better["per_seed"] == pytest.approx(diffs) and "t(0.95, n−1) paired standard errors" in better["rule"]
    )
    assert better["t"] == pytest.approx(2.919986, abs=1e-6)  # t(0.95, 2): the quantile for n = 3
    assert g["holds"] == all(c["holds"] for c in g["claims"])
    assert {x["arm"] for x in g["runs"]} == {"batch", "layer"} and all(
        x["final"] is not None for x in g["runs"]
    )


def test_a_live_group_gives_no_verdict_until_its_planned_seeds_are_in(app, client):
    # the online preset's case: LN ahead on the first seeds; the old rule said "holds" at 2 of 5
    body = client.post("/api/presets/online", json={"seeds": [0, 1, 2, 3, 4], "steps": 40}).json()
    runs = client.get("/api/runs", params={"group": body["group_id"]}).json()["items"]
    finals = {"layer": [0.5, 0.55, 0.9, 0.52, 0.95], "none": [0.8, 0.85, 0.7, 0.8, 0.75]}
    for seed in range(5):
        for x in runs:
            if x["spec"]["seed"] == seed:
                finish(app, x["id"], [(20, 2.0), (40, finals[x["spec"]["norm"]][seed])])
        g = client.get(f"/api/groups/{body['group_id']}").json()
        better = next(c for c in g["claims"] if c["kind"] == "better")
        if seed < 4:
            assert g["holds"] is None and g["pending"] and better["holds"] is None
            assert better["all_seeds"] is None and better["companion"]["holds"] is None
            assert (better["seeds_in"], better["seeds_expected"]) == (seed + 1, 5)
            if seed >= 1:  # the running estimate and its interval, never a verdict
                assert better["interval"] is not None and better["difference"] < 0
    assert (
        not g["pending"] and better["holds"] is False and g["holds"] is False
    )  # two seeds went the other way
    assert better["companion"]["text"].startswith("layer lower on 3 of 5 seeds")
    assert better["declared"] == "2d54ec1" and better["exploratory"] is False


def test_a_claim_that_fails_on_one_seed_says_so(app, client):
    body = client.post("/api/presets/fig6-batch4", json={"seeds": [0, 1]}).json()
    for x in client.get("/api/runs", params={"group": body["group_id"]}).json()["items"]:
        worse = x["spec"]["norm"] == "layer" and x["spec"]["seed"] == 1
        finish(app, x["id"], [(1000, 0.9 if worse else (0.5 if x["spec"]["norm"] == "layer" else 0.8))])
    claim = next(
        c for c in client.get(f"/api/groups/{body['group_id']}").json()["claims"] if c["kind"] == "better"
    )
    assert not claim["all_seeds"] and not claim["holds"] and claim["per_seed"] == pytest.approx([-0.3, 0.1])


def test_hidden_state_claims_read_the_runs_probes(app, client):
    body = client.post("/api/presets/long-sequences", json={"seeds": [0, 1], "steps": 5}).json()
    for x in client.get("/api/runs", params={"group": body["group_id"]}).json()["items"]:
        layer = x["spec"]["norm"] == "layer"
        grads = [1e-4, 1.0] if layer else [1e-14 * (1 + x["spec"]["seed"]), 1.0]
        norms = [0.1] * 21 + ([1.0, 1.1] if layer else [1.0, 3.0])
        hidden = {"hidden_norms": norms, "grad_norms": grads, "time_index": None}
        hidden["grad_norms"] = grads[:1] + [0.5] * 21 + grads[1:]
        finish(app, x["id"], [(5, 0.2)], probes={"hidden": hidden})
    g = client.get(f"/api/groups/{body['group_id']}").json()
    claims = {c["kind"]: c for c in g["claims"]}
    assert claims["gradient"]["holds"] and claims["gradient"]["all_seeds"]
    assert claims["gradient"]["per_seed"] == pytest.approx([-10.0, -10.0 + math.log10(2)])
    assert claims["steadier"]["per_seed"] == pytest.approx([1.1 - 3.0, 1.1 - 3.0])  # t ≥ 21 only
    traces = {c["label"]: c["traces"] for c in g["arms"]}
    assert traces["layer"]["grad_orders"]["mean"] == pytest.approx(4.0)


def test_sweeps_get_a_group_with_one_cell_per_varied_combination(app, client):
    r = client.post(
        "/api/sweeps",
        json={"base": {"task": "digits", "steps": 10}, "norms": ["layer", "batch"], "seeds": [0, 1]},
    )
    gid = r.json()["group_id"]
    for x in client.get("/api/runs", params={"group": gid}).json()["items"]:
        finish(app, x["id"], [(10, 0.1 * (1 + x["spec"]["seed"]))])
    g = client.get(f"/api/groups/{gid}").json()
    assert g["kind"] == "sweep" and g["varied"] == ["norm"] and g["claims"] is None
    assert {c["label"]: (c["n"], c["mean"]) for c in g["arms"]} == {
        "norm=layer": (2, pytest.approx(0.15)),
        "norm=batch": (2, pytest.approx(0.15)),
    }
    assert client.get(f"/api/groups/{gid}", params={"metric": "loss"}).status_code == 422


def test_bad_launches_and_unknown_names_say_what_to_change(client):
    r = client.post("/api/presets/fig7")
    assert r.status_code == 404 and "fig6-batch4" in r.json()["detail"] and "gain-init" in r.json()["detail"]
    for body, field in [
        ({"seeds": [-1]}, "seeds"),
        ({"seeds": [1, 1]}, "seeds"),
        ({"seeds": []}, "seeds"),
        ({"steps": 0}, "steps"),
        ({"steps": "many"}, "steps"),
        ({"seeds": [False]}, "seeds"),  # a boolean is not a seed (pydantic's lax mode reads it as 0)
        ({"steps": True}, "steps"),
        ({"seed": [1]}, "seed"),
    ]:
        r = client.post("/api/presets/online", json=body)
        assert r.status_code == 422 and field in r.json()["fields"], (body, r.text)
    assert client.post("/api/presets/online", json={"steps": 10**6}).status_code == 422
    assert client.get("/api/groups/nope").status_code == 404
    # no body: the preset's own seeds (≥ 5) and steps
    r = client.post("/api/presets/online")
    assert r.status_code == 201 and len(r.json()["run_ids"]) == 2 * len(PRESETS["online"].seeds) >= 10


def test_the_openapi_schema_names_the_claim_and_cell_models(client):
    schema = client.get("/api/openapi.json").json()
    models = schema["components"]["schemas"]
    ok = schema["paths"]["/api/groups/{group_id}"]["get"]["responses"]
    assert ok["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/GroupPublic")
    assert "409" in ok
    group = models["GroupPublic"]["properties"]
    assert group["arms"]["items"]["$ref"].endswith("/Arm")
    claims = next(b for b in group["claims"]["anyOf"] if b.get("type") == "array")["items"]
    # one model per kind of claim, told apart by "kind"
    assert claims["discriminator"]["propertyName"] == "kind"
    by_kind = {k: v.rsplit("/", 1)[-1] for k, v in claims["discriminator"]["mapping"].items()}
    assert by_kind == {
        "better": "PairedClaim",
        "faster": "PairedClaim",
        "steadier": "PairedClaim",
        "gradient": "PairedClaim",
        "gap": "PairedClaim",
        "close": "CloseClaim",
        "trains": "TrainsClaim",
        "decays": "DecaysClaim",
        "equilibrium": "LineClaim",
        "edge": "LineClaim",
        "chance": "ChanceClaim",
        "best": "BestClaim",
        "refused": "RefusedClaim",
    }
    assert "margin" in models["CloseClaim"]["required"] and "message" in models["RefusedClaim"]["required"]
    assert models["BestClaim"]["properties"]["versus"]["items"]["$ref"].endswith("/Comparison")
    arm = models["Arm"]["properties"]
    assert arm["curve"]["$ref"].endswith("/Curve")
    assert models["Curve"]["properties"]["at"]["items"]["$ref"].endswith("/CurvePoint")
    assert arm["traces"]["additionalProperties"]["$ref"].endswith("/TraceStat")
    # what normlab reproduce adds to an arm never reaches the API's shape
    assert not {"statuses", "messages", "wall_time", "aucs"} & set(arm)


def test_every_kind_of_claim_keeps_its_wire_fields(app, client):
    body = client.post("/api/presets/online", json={"seeds": [0, 1], "steps": 40}).json()
    for x in client.get("/api/runs", params={"group": body["group_id"]}).json()["items"]:
        finish(app, x["id"], [(20, 2.0), (40, 0.5 if x["spec"]["norm"] == "layer" else 2.4)])
    claims = {c["kind"]: c for c in client.get(f"/api/groups/{body['group_id']}").json()["claims"]}
    common = {"claim", "kind", "holds", "all_seeds", "difference", "se", "n", "per_seed", "rule"}
    common |= {"pending", "seeds_in", "seeds_expected", "t", "interval", "companion", "decides"}
    common |= {"companion_rule", "declared", "exploratory", "exploratory_why"}
    assert set(claims) == {"trains", "refused", "better"}
    assert set(claims["better"]) == common
    assert set(claims["trains"]) == common | {"chance"}
    assert claims["trains"]["chance"] == pytest.approx(math.log(10))
    assert set(claims["refused"]) == common | {"message"} and claims["refused"]["seeds_in"] is None


def _store_group_meta(app, group_id: str, text: str) -> None:
    from sqlalchemy import update

    from normlab.store.schema import groups

    with app.state.store.engine.begin() as conn:
        conn.execute(update(groups).where(groups.c.id == group_id).values(meta=text))


@pytest.mark.parametrize(
    ("stored", "named"),
    [
        ('{"kind": "preset", "preset": "online", "labels": ["r1", "r2"]}', "labels"),
        ('{"kind": "preset", "labels": {}}', "preset"),
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_a_malformed_stored_group_is_named_in_a_409_and_nothing_is_lost(app, client, stored, named):
    body = client.post("/api/presets/online", json={"seeds": [0, 1], "steps": 40}).json()
    gid = body["group_id"]
    _store_group_meta(app, gid, stored)
    r = client.get(f"/api/groups/{gid}")
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    assert gid in detail and named in detail and f"GET /api/runs?group={gid}" in detail
    # the runs are all still there, one by one
    listed = client.get("/api/runs", params={"group": gid}).json()["items"]
    assert sorted(x["id"] for x in listed) == sorted(body["run_ids"])


def test_a_stored_run_summary_of_the_wrong_type_is_named_in_a_409(app, client):
    from sqlalchemy import update

    from normlab.store.schema import runs

    body = client.post("/api/presets/online", json={"seeds": [0, 1], "steps": 40}).json()
    for x in client.get("/api/runs", params={"group": body["group_id"]}).json()["items"]:
        finish(app, x["id"], [(20, 2.0), (40, 0.5)])
    bad = body["run_ids"][0]
    with app.state.store.engine.begin() as conn:
        conn.execute(
            update(runs).where(runs.c.id == bad).values(summary=json.dumps({"metrics": {"val_loss": "low"}}))
        )
    r = client.get(f"/api/groups/{body['group_id']}")
    assert r.status_code == 409 and body["group_id"] in r.json()["detail"]
    assert bad in r.json()["detail"] and "metrics.val_loss" in r.json()["detail"]
    assert app.state.store.get_run(bad) is not None


def test_presets_carry_a_duration_estimate_from_measured_runs_of_earlier_launches_and_none_before(
    app, client
):
    from sqlalchemy import update

    from normlab.store.schema import runs as runs_table

    def estimates():
        return {p["name"]: p["estimate"] for p in client.get("/api/presets").json()}

    assert estimates()["fig6-batch4"] is None  # nothing measured: no estimate invented
    preset = PRESETS["fig6-batch4"]
    launched = client.post("/api/presets/fig6-batch4", json={"seeds": [0, 1]}).json()
    # a launch with a steps override does different work: its runs never count
    shortened = client.post("/api/presets/fig6-batch4", json={"seeds": [0, 1], "steps": 10}).json()
    norms = {x["id"]: x["spec"]["norm"] for x in client.get("/api/runs").json()["items"]}
    seconds = {"batch": [30.0, 50.0], "layer": [20.0, 20.0]}
    spans = {}
    for group in (launched, shortened):
        for k, run_id in enumerate(group["run_ids"]):
            finish(app, run_id, [(5, 2.0), (10, 1.0)])
            done = sum(norms[r] == norms[run_id] for r in spans if r in group["run_ids"])
            span = seconds[norms[run_id]][done] if group is launched else 1000.0
            spans[run_id] = (1000.0 + k, 1000.0 + k + span)
            with app.state.store.engine.begin() as conn:
                conn.execute(
                    update(runs_table)
                    .where(runs_table.c.id == run_id)
                    .values(started_at=spans[run_id][0], finished_at=spans[run_id][1])
                )
    est = estimates()["fig6-batch4"]
    assert est["measured"] == 4
    assert est["run_s"] == pytest.approx(25.0)  # median of 30, 50, 20, 20
    # the preset's own seeds × (batch's median 40 + layer's median 20)
    assert est["one_worker_s"] == pytest.approx(len(preset.seeds) * 60.0)
    # the launch as it ran here: its first start (1000) to its last end
    ends = [spans[r][1] for r in launched["run_ids"]]
    assert est["last_launch_s"] == pytest.approx(max(ends) - 1000.0) and max(ends) > 1050.0
    assert estimates()["online"] is None
