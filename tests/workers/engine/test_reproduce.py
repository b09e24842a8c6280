"""`workers.engine.reproduce`: every (run, seed) trained through the engine, in worker processes or here, and
the claims that held on every seed in REPRODUCTIONS.md, re-checked at reduced steps. The rules themselves
are tested in tests/normlab/test_claims.py."""

from __future__ import annotations

import dataclasses

import pytest

from normlab.presets import PRESETS
from normlab.spec import ProbeSpec
from workers.engine import train
from workers.engine.reproduce import reproduce


def test_a_tiny_reproduction_matches_the_engine_run_by_run_in_processes_or_here(settings):
    out = reproduce("fig6-batch4", seeds=[0, 1], steps=3, settings=settings, jobs=2)
    assert [r["label"] for r in out["runs"]] == ["batch", "layer"] and out["jobs"] == 2
    for run in out["runs"]:
        assert run["statuses"] == ["completed", "completed"] and len(run["values"]) == 2
        assert run["curve"]["steps"] == [3]  # steps < eval_every: one evaluation, at the last step
    spec = PRESETS["fig6-batch4"].runs[1].model_copy(update={"steps": 3, "seed": 1})
    direct = train(spec, settings=settings)
    assert out["runs"][1]["values"][1] == pytest.approx(direct.metrics["val_loss"], rel=1e-5)
    here = reproduce("fig6-batch4", seeds=[0, 1], steps=3, settings=settings, jobs=1)
    assert [v for r in here["runs"] for v in r["values"]] == pytest.approx(
        [v for r in out["runs"] for v in r["values"]], rel=1e-5
    )
    claim = out["direction"]["claims"][0]
    assert claim["claim"] == "layer better than batch" and {"difference", "se", "n", "rule"} <= set(claim)


def test_long_sequences_records_gradient_and_hidden_traces(settings):
    # The preset at a tenth of its length: the per-time-step traces reach the claims through trace_stats.
    full = PRESETS["long-sequences"]
    runs = tuple(
        r.model_copy(update={"seq_len": 30, "probes": ProbeSpec(enabled=True, trace_every=5)})
        for r in full.runs
    )
    preset = dataclasses.replace(full, runs=runs)
    out = reproduce(preset, seeds=[0, 1], steps=10, settings=settings, jobs=1)
    for run in out["runs"]:
        assert set(run["traces"]) == {"hidden_spread", "hidden_spread_late", "grad_orders"}, run["label"]
        assert None not in run["traces"]["grad_orders"]["values"]
    kinds = {c["kind"] for c in out["direction"]["claims"]}
    assert kinds == {"gradient", "steadier"}


@pytest.mark.slow
def test_layernorm_trains_online_and_batchnorm_is_refused(settings):
    out = reproduce("online", seeds=[0, 1, 2], steps=150, settings=settings)
    claims = {c["kind"]: c for c in out["direction"]["claims"]}
    assert claims["trains"]["all_seeds"] and claims["better"]["all_seeds"]
    assert claims["refused"]["holds"] and "'layer'" in claims["refused"]["message"]
