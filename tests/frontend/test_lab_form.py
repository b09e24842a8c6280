"""The Lab form: fields, defaults, the server's limits, required fields, spec JSON, the URL query."""

from __future__ import annotations

import pytest

from frontend import lab_form as logic
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
