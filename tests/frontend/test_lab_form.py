"""The Lab form: fields, defaults, the server's limits, required fields, spec JSON, the URL query."""

from __future__ import annotations

import pytest

from frontend import lab_form as logic
from normlab.api_catalog import build_catalog
from normlab.settings import Settings
from normlab_client.spec import RunSpec, combination_problems


def test_build_spec_leaves_out_non_sequential_fields_and_carries_the_probe_settings():
    form = {
        **logic.field_defaults("digits"),
        "batch_size": 4,
        "cell": "lstm",
        "seq_len": 50,
        "probes": ["on"],
        "budget": 40,
        "fisher_every": 10,
        "hessian": ["on"],
    }
    spec = logic.build_spec("digits", "layer", form)
    assert "cell" not in spec and "seq_len" not in spec and spec["batch_size"] == 4
    assert spec["probes"] == {
        "enabled": True,
        "trace_every": 25,
        "fisher_every": 10,
        "budget": 0.4,
        "hessian": True,
        "empirical_fisher": False,
    }
    RunSpec.model_validate(spec)  # the API would accept it
    seq = logic.build_spec("adding", "layer", {**form, "probes": []})
    assert seq["cell"] == "lstm" and seq["seq_len"] == 50 and "probes" not in seq


def test_limits_come_from_the_catalog_and_an_empty_field_is_refused_with_them():
    fields = build_catalog(None, Settings(max_steps=500, min_probe_every=7))["fields"]
    limits = logic.field_limits(fields)
    assert limits["steps"] == {"min": 1, "max": 500, "min_open": False}
    assert limits["fisher_every"]["min"] == 7 and limits["budget"]["max"] == 500  # percent
    assert limits["lr"]["min_open"] and logic.range_text("lr", limits) == "a number above 0, at most 10"
    form = {**logic.field_defaults("digits"), "batch_size": None, "lr": float("nan"), "seq_len": None}
    missing = logic.missing_messages("digits", form, limits)
    # seq_len is not shown for digits; the probe settings are not shown while probes are off
    assert set(missing) == {"batch_size", "lr"}
    assert missing["batch_size"] == "Required: enter a whole number from 1 to 4096."
    probed = {**logic.field_defaults("digits"), "probes": ["on"], "budget": None}
    assert set(logic.missing_messages("digits", probed, limits)) == {"budget"}


def test_form_query_round_trip_ignores_what_does_not_parse():
    values = logic.form_from_query(
        "adding",
        {
            "lr": "0.002",
            "steps": "many",
            "probes": "1",
            "budget": "30",
            "hessian": "0",
            "cell": "gru",
            "runs": "a,b",
        },
    )
    assert values["lr"] == 0.002 and values["steps"] == 400 and values["probes"] == ["on"]
    assert values["budget"] == 30 and values["hessian"] == [] and values["cell"] == "gru"
    assert logic.field_defaults("digits")["budget"] == 15  # percent, as typed


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
    assert body == {
        "base": {"task": "digits"},
        "norms": ["layer", "batch"],
        "batch_sizes": [4, 128],
        "seeds": [0, 1],
    }


def test_field_messages_map_api_keys_onto_form_fields():
    names = ["batch_size", "seq_len", "probes", "norm"]  # no budget field: its message goes to Probes
    spec = RunSpec.model_construct(
        task="digits",
        norm="batch",
        batch_size=1,
        cell=None,
        seq_len=None,
        eval_seq_len=None,
        ln_placement="full",
    )
    problems = dict(combination_problems(spec))
    got = logic.field_messages(
        {
            "batch_size": problems["batch_size"],
            "base.seq_len": "too long",
            "probes.budget": "too big",
            "batch_sizes": "empty",
            "norms.0": "bad",
        },
        names,
    )
    assert got["batch_size"].startswith("BatchNorm needs batch size") and got["batch_size"].endswith("empty")
    assert got["seq_len"] == "too long" and got["probes"] == "too big" and got["norm"] == "bad"
    assert logic.field_messages({"unknown": "x"}, names) == {}
    assert logic.field_messages({"probes.budget": "too big"}, names + ["budget"]) == {"budget": "too big"}


def test_query_from_spec_rebuilds_the_form_and_the_budget_a_warning_asks_for():
    spec = RunSpec(
        task="adding", norm="rms", lr=0.003, probes={"enabled": True, "budget": 0.25, "hessian": True}
    ).resolved()
    query = logic.query_from_spec(spec.model_dump(), budget=40)
    values = logic.form_from_query("adding", query)
    assert query["norm"] == "rms" and values["lr"] == 0.003 and values["probes"] == ["on"]
    assert values["budget"] == 40 and values["hessian"] == ["on"] and values["seq_len"] == spec.seq_len
    assert logic.query_from_spec(spec.model_dump())["budget"] == "25"
    warn = {
        "payload": {"level": "warning", "message": "No Fisher estimate fitted the budget — raise it to 37 %"}
    }
    assert logic.budget_that_fits([warn]) == 37
    assert logic.budget_that_fits([{"payload": {"budget_needed": 0.4, "message": "…"}}]) == 40
    assert logic.budget_that_fits([{"payload": {"message": "data loaded"}}]) is None


def test_the_transformer_position_and_weight_standardization_show_where_they_apply():
    assert "ln_position" in logic.visible_fields("reverse", False)
    assert "weight_standardization" not in logic.visible_fields("reverse", False)
    assert "weight_standardization" in logic.visible_fields("conv-digits", False)
    assert not {"ln_position", "weight_standardization"} & set(logic.visible_fields("digits", False))
    post = logic.build_spec("reverse", "layer", {**logic.field_defaults("reverse"), "ln_position": "post"})
    assert RunSpec.model_validate(post).ln_position == "post"
    conv = logic.field_defaults("conv-digits")
    assert conv["weight_standardization"] == []  # a check box, unticked by default
    assert "weight_standardization" not in logic.build_spec("conv-digits", "group", conv)
    ticked = logic.build_spec("conv-digits", "group", {**conv, "weight_standardization": ["on"]})
    assert RunSpec.model_validate(ticked).weight_standardization is True
    query = logic.query_from_spec(RunSpec.model_validate(ticked).resolved().model_dump())
    assert logic.form_from_query("conv-digits", query)["weight_standardization"] == ["on"]
