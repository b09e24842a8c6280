"""The event contracts: one status enum, typed payloads checked where the engine numbers events, and the
run summary's wire form (only what was set, so an unfinished run's summary is `{}`)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from normlab_client.api_models import RunPublic
from normlab_client.events import (
    ACTIVE_STATUSES,
    PAYLOADS,
    TERMINAL_STATUSES,
    EventCounter,
    RunStatus,
    RunSummary,
    check_payload,
)
from normlab_client.spec import RunSpec


def test_statuses_split_into_active_and_terminal():
    assert ACTIVE_STATUSES | TERMINAL_STATUSES == set(RunStatus) and not ACTIVE_STATUSES & TERMINAL_STATUSES
    assert RunStatus.LOST in TERMINAL_STATUSES and "queued" in ACTIVE_STATUSES  # equal to their strings
    assert json.dumps({"status": RunStatus.COMPLETED}) == '{"status": "completed"}'  # the wire is unchanged


def test_every_event_kind_has_a_payload_model():
    assert set(PAYLOADS) == {"scalars", "status", "log", "hidden", "fisher", "intervention"}


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("scalars", {"train_loss": 1.0}),  # grad_norm, lr, steps_per_s, elapsed missing
        ("status", {"status": "finished"}),  # not a RunStatus
        ("log", {"level": "loud", "message": "x"}),
        ("hidden", {"time_steps": [1, 2]}),
        ("fisher", {"trace": {}}),  # trace_estimator and weight_sets missing
    ],
)
def test_a_payload_that_breaks_its_contract_is_refused(kind, payload):
    with pytest.raises(ValidationError):
        check_payload(kind, payload)


def test_the_event_counter_checks_before_numbering():
    sent = []
    events = EventCounter(sent.append, run_id="r")
    events("log", 0, {"level": "info", "message": "hello", "traceback": "kept as sent"})
    with pytest.raises(ValidationError):
        events("status", 1, {"status": "nope"})
    assert [e.seq for e in sent] == [1] and sent[0].payload["traceback"] == "kept as sent"
    # a payload its caller vouches for (check=False) is numbered as it is; the default checks
    events("status", 2, {"status": "nope"}, check=False)
    assert [e.seq for e in sent] == [1, 2] and sent[1].payload == {"status": "nope"}
    with pytest.raises(ValidationError):
        events("status", 3, {"status": "nope"}, check=True)


def test_summary_serializes_only_what_was_set():
    assert RunSummary().model_dump(mode="json") == {}
    done = RunSummary(metrics={"val_loss": 0.5}, probes=None, step=3, wall_time=1.5)
    assert done.model_dump(mode="json") == {
        "metrics": {"val_loss": 0.5},
        "probes": None,
        "step": 3,
        "wall_time": 1.5,
    }
    assert RunSummary.model_validate({"step": 7}).model_dump(mode="json") == {"step": 7}


def test_run_public_reads_the_stored_json_and_gives_it_back_unchanged():
    spec = RunSpec(task="digits", steps=5).resolved().model_dump(mode="json")
    summary = {"metrics": {"val_loss": None}, "probes": None, "step": 5, "wall_time": 0.2}
    run = RunPublic(id="r", spec=spec, status="completed", created_at=0, summary=summary)
    out = json.loads(run.model_dump_json())
    assert out["spec"] == spec and out["summary"] == summary and out["status"] == "completed"
    assert (
        json.loads(RunPublic(id="q", spec=spec, status="queued", created_at=0).model_dump_json())["summary"]
        == {}
    )


def test_a_fisher_payload_stored_with_the_old_groups_key_still_reads():
    """Fisher events stored before the weight sets' key was "weight_sets" say "groups"."""
    from normlab_client.events import FisherPayload, fisher_weight_sets

    entry = {"name": "layers.0.weight", "weight_norm": 2.0}
    old = {"trace": {}, "trace_estimator": {}, "groups": [entry]}
    new = {"trace": {}, "trace_estimator": {}, "weight_sets": [entry]}
    assert FisherPayload.model_validate(old).weight_sets == [entry]
    assert FisherPayload.model_validate(new).weight_sets == [entry]
    assert fisher_weight_sets(old) == fisher_weight_sets(new) == [entry]
    assert fisher_weight_sets({"trace": {}}) == []
