"""A run's probe events follow from its spec and seed: the same steps and values on a busy host."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from normlab_client.spec import ProbeSpec, RunSpec
from workers.engine import train
from workers.probes import make_prober
from workers.probes.plan import plan
from workers.probes.prober import model_kind

from .conftest import tiny

SPECS = {
    # budgets where the plan, not the cadence, limits the estimates (the old clock budget decided there)
    "mlp": dict(
        task="digits",
        norm="batch",
        hidden_size=16,
        steps=120,
        probes=dict(trace_every=10, fisher_every=5, budget=0.3),
    ),
    "lstm": dict(
        task="seq-digits",
        norm="layer",
        hidden_size=16,
        steps=60,
        probes=dict(trace_every=10, fisher_every=5, budget=1.0),  # three estimates to tolerance
    ),
}


def _probe_events(spec: RunSpec, settings) -> tuple[list, dict]:
    events: list = []
    result = train(spec, events.append, settings=settings)
    assert result.status == "completed", result.error
    return [
        (e.kind, e.step, json.dumps(e.payload, sort_keys=True))
        for e in events
        if e.kind in ("hidden", "fisher")
    ], result.probes


@pytest.mark.parametrize("name", sorted(SPECS))
def test_two_runs_of_one_spec_give_identical_probe_events_while_a_busy_process_shares_the_cpu(name, settings):
    kw = dict(SPECS[name])
    spec = RunSpec(**{**kw, "probes": ProbeSpec(enabled=True, **kw["probes"])}, eval_every=1000, seed=3)
    quiet, summary = _probe_events(spec, settings)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # competes for the CPU
    try:
        busy, _ = _probe_events(spec, settings)
        assert burner.poll() is None, "the busy process ran through the second run"
    finally:
        burner.kill()
        burner.wait()
    fisher = [step for kind, step, _ in quiet if kind == "fisher"]
    assert len(fisher) >= 3 and fisher[0] == 5
    assert summary["plan"]["fisher_count"] == len(fisher)
    assert [(k, s) for k, s, _ in busy] == [(k, s) for k, s, _ in quiet]  # the same steps
    assert busy == quiet  # and the same values, to the last bit


def test_the_run_follows_the_plan_of_its_spec(settings):
    kw = SPECS["mlp"]
    spec = RunSpec(**{**kw, "probes": ProbeSpec(enabled=True, **kw["probes"])}, eval_every=1000)
    events, summary = _probe_events(spec, settings)
    expected = plan(spec, "feedforward")
    assert [s for k, s, _ in events if k == "fisher"] == list(expected.fisher_steps)
    assert [s for k, s, _ in events if k == "hidden"] == [s for s in range(1, 121) if expected.traces(s)]
    assert summary["plan"] == expected.public()
    costs = [json.loads(p)["cost_steps"] for k, _, p in events if k == "fisher"]
    assert costs == [expected.cold_cost] + [expected.warm_cost] * (len(costs) - 1)


def _prober(seed: int):
    spec = RunSpec(task="digits", steps=50, seed=seed, probes=ProbeSpec(enabled=True))
    data = SimpleNamespace(info=SimpleNamespace(target="class"), loss=F.cross_entropy)
    model, x, y = tiny("layer", seed=0, batch=64)
    return make_prober(spec, model, data, torch.optim.SGD(model.parameters(), lr=0.1)), model, x, y


def _estimate(prober, model, x, y) -> dict:
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    payload, _ = prober.curvature.estimate(x, y, 0.1)
    return payload


def test_probes_draw_from_their_own_generator_and_never_from_the_training_rng():
    prober, model, x, y = _prober(seed=1)
    assert model_kind(model) == "feedforward"
    saved = prober.rng_state()
    global_state = torch.get_rng_state()
    first = _estimate(prober, model, x, y)
    assert torch.equal(torch.get_rng_state(), global_state)  # the training RNG did not move
    assert not torch.equal(prober.rng_state()["generator"], saved["generator"])  # the probes' own did
    # another seed samples other labels; loading the saved state gives the first draws back
    other, model2, _, _ = _prober(seed=2)
    assert _estimate(other, model2, x, y)["trace_raw"] != first["trace_raw"]
    again, model3, _, _ = _prober(seed=2)
    again.load_rng_state(saved)
    assert again.generator is again.curvature.generator
    assert _estimate(again, model3, x, y)["trace_raw"] == first["trace_raw"]
