"""Callback logic: forms, API errors, URL state, run tables."""

from __future__ import annotations

import pytest

from frontend import logic
from normlab.spec import RunSpec, combination_problems


def test_build_spec_leaves_out_empty_and_non_sequential_fields():
    form = {"batch_size": 4, "steps": None, "lr": "", "cell": "lstm", "seq_len": 50, "probes": ["on"],
            "seed": 0}
    spec = logic.build_spec("digits", "layer", form)
    assert spec == {"task": "digits", "norm": "layer", "batch_size": 4, "seed": 0,
                    "probes": {"enabled": True}}
    RunSpec.model_validate(spec)  # the API would accept it
    seq = logic.build_spec("adding", "layer", form)
    assert seq["cell"] == "lstm" and seq["seq_len"] == 50


def test_field_defaults_match_resolved_spec_for_every_task():
    for task in ("digits", "adding", "charlm", "conv-digits"):
        d = logic.field_defaults(task)
        spec = RunSpec.model_validate(logic.build_spec(task, "layer", d))
        resolved = RunSpec(task=task).resolved()
        for name in ("steps", "lr", "hidden_size", "layers", "seq_len", "cell"):
            assert getattr(spec, name) == getattr(resolved, name), (task, name)


def test_parse_int_list_and_sweep_body():
    assert logic.parse_int_list("4, 32 ;128", "x") == [4, 32, 128]
    assert logic.parse_int_list("", "x") == []
    with pytest.raises(ValueError, match="Batch sizes: type whole numbers"):
        logic.sweep_body({"task": "digits"}, ["layer"], "4, many", "0")
    body = logic.sweep_body({"task": "digits"}, ["layer", "batch"], "4,128", "0 1")
    assert body == {"base": {"task": "digits"}, "norms": ["layer", "batch"], "batch_sizes": [4, 128],
                    "seeds": [0, 1]}


def test_field_messages_map_api_keys_onto_form_fields():
    names = ["batch_size", "seq_len", "probes", "norm"]
    spec = RunSpec.model_construct(task="digits", norm="batch", batch_size=1, cell=None, seq_len=None,
                                   eval_seq_len=None, ln_placement="full")
    problems = dict(combination_problems(spec))
    got = logic.field_messages({"batch_size": problems["batch_size"], "base.seq_len": "too long",
                                "probes.budget": "too big", "batch_sizes": "empty", "norms.0": "bad"}, names)
    assert got["batch_size"].startswith("BatchNorm needs batch size") and got["batch_size"].endswith("empty")
    assert got["seq_len"] == "too long" and got["probes"] == "too big" and got["norm"] == "bad"
    assert logic.field_messages({"unknown": "x"}, names) == {}


def test_query_round_trip_and_compare_state_is_checked():
    q = logic.encode_query({"runs": ["a1", "b2"], "smooth": 0.6, "empty": "", "none": None, "present": True})
    assert q == "?runs=a1,b2&smooth=0.6&present=1"
    params = logic.decode_query(q)
    state = logic.compare_state(params)
    assert state == {"runs": ["a1", "b2"], "smooth": 0.6, "color": "norm", "x": "step",
                     "panels": ["loss", "val", "metric"]}
    bad = logic.compare_state({"smooth": "7", "color": "rainbow", "x": "t", "panels": "nope"})
    assert bad["smooth"] == 0.99 and bad["color"] == "norm" and bad["x"] == "step"
    assert bad["panels"] == ["loss", "val", "metric"]
    assert logic.compare_state({"smooth": "nan"})["smooth"] == 0.0
    assert logic.is_present(params) and not logic.is_present({})


def test_cursor_of_follows_only_live_runs():
    runs = [{"id": "a", "status": "running", "last_seq": 12},
            {"id": "b", "status": "completed", "last_seq": 9}, {"id": "c", "status": "queued", "last_seq": 0}]
    assert logic.cursor_of(runs) == {"a": 12, "c": 0}


def test_run_rows_and_final_metric():
    run = {"id": "r1", "status": "completed", "spec": {"task": "digits", "norm": "layer", "batch_size": 4,
                                                        "seed": 1, "steps": 300},
           "owner": None, "group_id": "g", "created_at": "2026-11-29T17:00:00+00:00",
           "summary": {"metrics": {"val_loss": 0.12345, "accuracy": 0.9}}}
    (row,) = logic.run_rows([run])
    assert row["norm"] == "layer" and row["batch_size"] == 4 and row["group"] == "g"
    assert row["created"] == "2026-11-29 17:00:00"
    assert row["result"] == "val_loss 0.1235 · accuracy 0.9"
    assert logic.runs_query({"task": "digits", "norm": None, "owner": ""}) == {"task": "digits", "limit": 200}
    assert logic.can_cancel("running") and not logic.can_cancel("completed")
