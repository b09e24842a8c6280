"""A batch run that yields its worker (a live "yield" request) checkpoints at its next reported step,
ends as `queued` without a status event of its own, and resumed from there continues bit for bit: two
yields give the same events, metrics and probe summary as the run undisturbed."""

from __future__ import annotations

import pytest

from normlab import checkpoints
from normlab.settings import Settings
from normlab_client.spec import RunSpec
from workers.engine import train
from workers.engine.checkpoint import Resume

SPEC = RunSpec(
    task="digits",
    norm="layer",
    hidden_size=16,
    steps=40,
    eval_every=10,
    checkpoint_every=16,
    device="cpu",
    probes={"enabled": True, "trace_every": 4, "fisher_every": 6, "budget": 5.0},
)


@pytest.fixture
def ck_settings(engine_data_dir, tmp_path) -> Settings:
    return Settings(data_dir=engine_data_dir, checkpoint_dir=tmp_path / "ck", kernel_backend="torch")


def _reported(events) -> list[tuple]:
    """What a viewer sees of the run: every step's scalars (less the clock) and probe payloads."""
    out = []
    for e in events:
        if e.kind == "scalars":
            out.append((e.step, {k: v for k, v in e.payload.items() if k not in ("steps_per_s", "elapsed")}))
        elif e.kind in ("hidden", "fisher", "intervention"):
            out.append((e.step, e.kind, e.payload))
    return out


def _yield_after(polls: int):
    calls = iter(range(10_000))
    return lambda: [{"kind": "yield"}] if next(calls) == polls else []


def test_a_run_that_yields_twice_ends_as_the_undisturbed_run(ck_settings):
    whole_events: list = []
    whole = train(SPEC, whole_events.append, settings=ck_settings, run_id="whole")
    assert whole.status == "completed"

    stored: list = []
    first = train(SPEC, stored.append, settings=ck_settings, run_id="y", poll=_yield_after(7))
    assert first.status == "queued" and not [e for e in stored if e.kind == "status" and e.step > 0]
    said = [e for e in stored if e.kind == "log" and e.payload.get("phase") == "yield"]
    assert len(said) == 1 and "Yielded its worker" in said[0].payload["message"]
    at = said[0].step
    # it stopped at a reported step, and its checkpoint there is the one it continues from
    assert at == max(e.step for e in stored if e.kind == "scalars") and at in checkpoints.steps(
        ck_settings.checkpoint_root, "y"
    )
    point = Resume(step=at, seq=stored[-1].seq, reported=at, yielded=True)
    second = train(SPEC, stored.append, settings=ck_settings, run_id="y", poll=_yield_after(9), resume=point)
    assert second.status == "queued"
    at2 = [e for e in stored if e.kind == "log" and e.payload.get("phase") == "yield"][-1].step
    assert at2 > at
    point = Resume(step=at2, seq=stored[-1].seq, reported=at2, yielded=True)
    third = train(SPEC, stored.append, settings=ck_settings, run_id="y", resume=point)
    assert third.status == "completed"

    # gap-free numbering, every step once, and the same numbers to the bit
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert _reported(stored) == _reported(whole_events)
    assert third.metrics == whole.metrics
    timed = ("overhead", "overhead_parts")  # the probes' measured cost: the clock's, in any two runs
    assert third.probes is not None and whole.probes is not None
    assert {k: v for k, v in third.probes.items() if k not in timed} == {
        k: v for k, v in whole.probes.items() if k not in timed
    }
    resumed = [e.payload["message"] for e in stored if e.kind == "log" and e.payload.get("phase") == "resume"]
    assert resumed == [
        f"Resumed from its checkpoint of step {s} (it had yielded its worker to an interactive run)."
        for s in (at, at2)
    ]
