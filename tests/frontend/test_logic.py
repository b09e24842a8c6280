"""Callback logic: forms, API errors, URL state, run tables."""

from __future__ import annotations

from frontend import logic


def test_query_round_trip_and_compare_state_is_checked():
    q = logic.encode_query({"runs": ["a1", "b2"], "smooth": 0.6, "empty": "", "none": None, "present": True})
    assert q == "?runs=a1,b2&smooth=0.6&present=1"
    params = logic.decode_query(q)
    state = logic.compare_state(params)
    assert state == {
        "runs": ["a1", "b2"],
        "smooth": 0.6,
        "color": "norm",
        "x": "step",
        "panels": ["loss", "val", "metric"],
    }
    bad = logic.compare_state({"smooth": "7", "color": "rainbow", "x": "t", "panels": "nope"})
    assert bad["smooth"] == 0.99 and bad["color"] == "norm" and bad["x"] == "step"
    assert bad["panels"] == ["loss", "val", "metric"]
    assert logic.compare_state({"smooth": "nan"})["smooth"] == 0.0
    assert logic.is_present(params) and not logic.is_present({})


def test_cursor_of_follows_only_live_runs():
    runs = [
        {"id": "a", "status": "running", "last_seq": 12},
        {"id": "b", "status": "completed", "last_seq": 9},
        {"id": "c", "status": "queued", "last_seq": 0},
    ]
    assert logic.cursor_of(runs) == {"a": 12, "c": 0}


def test_run_rows_and_final_metric():
    run = {
        "id": "r1",
        "status": "completed",
        "spec": {"task": "digits", "norm": "layer", "batch_size": 4, "seed": 1, "steps": 300},
        "owner": None,
        "group_id": "g",
        "created_at": "2026-11-29T17:00:00+00:00",
        "summary": {
            "metrics": {"val_loss": 0.12345, "val_accuracy": 0.8, "test_accuracy": 0.9},
            "step": 300,
            "wall_time": 4.0,
        },
    }
    (row,) = logic.run_rows([run])
    assert row["norm"] == "layer" and row["batch_size"] == 4 and row["group"] == "[g](/compare?group=g)"
    assert row["created"] == "2026-11-29 17:00:00"
    assert logic.final_metric(run) == "val_loss 0.1235 · accuracy 0.9"
    # numbers, not text, so the table sorts them as numbers; the test split's metric before validation's
    assert (row["val_loss"], row["accuracy"], row["bpc"]) == (0.12345, 0.9, None)
    assert (row["steps_per_s"], row["wall_time"]) == (75.0, 4.0)
    running = logic.run_rows([{**run, "summary": {}}])[0]
    assert running["val_loss"] is None and running["steps_per_s"] is None
    assert logic.runs_query({"task": "digits", "norm": None, "owner": ""}) == {"task": "digits", "limit": 200}
    assert logic.can_cancel("running") and not logic.can_cancel("completed")
