"""The run spec: ranges, combinations, task defaults, and the catalog built from the same data."""

import pytest
from pydantic import ValidationError

from normlab.api_catalog import build_catalog
from normlab_client.catalog import TASKS, task_availability
from normlab_client.spec import RunSpec


def test_batchnorm_at_batch_size_one_names_the_batch_size_and_suggests_layernorm():
    with pytest.raises(ValidationError) as err:
        RunSpec(task="digits", norm="batch", batch_size=1)
    msg = str(err.value)
    assert "batch size" in msg and "layer" in msg
    assert err.value.errors()[0]["ctx"]["fields"] == ["batch_size"]


@pytest.mark.parametrize(
    "bad,field",
    [
        ({"task": "digits", "cell": "lstm"}, "cell"),
        ({"task": "digits", "seq_len": 10}, "seq_len"),
        ({"task": "adding", "seq_len": 3000}, "seq_len"),
        ({"task": "seq-digits", "seq_len": 9}, "seq_len"),
        ({"task": "adding", "seq_len": 50, "eval_seq_len": 20}, "eval_seq_len"),
        ({"task": "digits", "norm": "group"}, "norm"),
        ({"task": "adding", "norm": "batch", "ln_placement": "cell"}, "ln_placement"),
        ({"task": "adding", "cell": "gru", "ln_placement": "cell"}, "ln_placement"),
        ({"task": "digits", "norm": "layer", "bn_variance": "unbiased"}, "bn_variance"),
        ({"task": "pixel-digits", "seq_len": 8}, "seq_len"),
        ({"task": "digits", "ln_position": "post"}, "ln_position"),
        ({"task": "reverse", "norm": "batch"}, "norm"),
        ({"task": "pixel-mnist5k", "norm": "batch"}, "norm"),
    ],
)
def test_each_bad_combination_is_refused_with_its_field(bad, field):
    with pytest.raises(ValidationError) as err:
        RunSpec(**bad)
    assert field in err.value.errors()[0]["ctx"]["fields"]


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_size": 0},
        {"lr": 0},
        {"steps": 10**9},
        {"norm": "foo"},
        {"unknown_field": 1},
        {"gain_init": -1},
        {"task": "reverse", "ln_position": "middle"},
    ],
)
def test_out_of_range_fields_are_refused(bad):
    with pytest.raises(ValidationError):
        RunSpec(**bad)


def test_resolved_fills_task_defaults_and_round_trips():
    spec = RunSpec(task="adding", norm="layer").resolved()
    assert spec.cell == "lstm" and spec.seq_len == TASKS["adding"].seq_len
    assert spec.eval_seq_len == spec.seq_len and spec.steps == TASKS["adding"].steps
    assert RunSpec.model_validate_json(spec.model_dump_json()) == spec
    flat = RunSpec(task="digits").resolved()
    assert flat.cell is None and flat.seq_len is None and flat.hidden_size == TASKS["digits"].hidden_size


def test_mnist_is_unavailable_without_files_and_available_with_them(tmp_path):
    avail = task_availability("mnist", tmp_path)
    assert not avail.available and "digits" in avail.reason and str(tmp_path) in avail.reason
    (tmp_path / "mnist").mkdir()
    for stem in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte.gz",
    ):
        (tmp_path / "mnist" / stem).write_bytes(b"")
    assert task_availability("mnist", tmp_path).available


def test_catalog_lists_every_task_and_field_ranges():
    cat = build_catalog(None)
    assert {t["name"] for t in cat["tasks"]} == set(TASKS)
    assert cat["fields"]["batch_size"]["minimum"] == 1
    assert "trace_every" in cat["fields"]["probes"]


def test_catalog_gives_the_probe_settings_and_their_limits():
    """The Lab's probe controls read their ranges from GET /api/catalog (fields.probes), not a copy."""
    from normlab.api_catalog import build_catalog
    from normlab_client.spec import ProbeSpec

    probes = build_catalog()["fields"]["probes"]
    for name in ("trace_every", "fisher_every", "budget", "hessian", "empirical_fisher", "power_iterations"):
        assert probes[name]["default"] == getattr(ProbeSpec(), name), name
    assert probes["trace_every"]["minimum"] == 1 and probes["trace_every"]["maximum"] == 100_000
    assert probes["fisher_every"]["minimum"] == 1 and probes["fisher_every"]["maximum"] == 100_000
    assert probes["budget"]["exclusiveMinimum"] == 0 and probes["budget"]["maximum"] == 5.0
    assert probes["hessian"]["type"] == probes["empirical_fisher"]["type"] == "boolean"


def test_warm_krylov_vectors_default_per_task_kind_and_an_explicit_value_is_kept():
    """power_iterations left out resolves to the task kind's default (3 on conv nets, whose top Fisher
    direction moves more between estimates; 2 elsewhere); a value the user gave is stored as given."""
    from normlab_client.spec import ProbeSpec, RunSpec

    assert RunSpec(task="conv-digits").resolved().probes.power_iterations == 3
    assert RunSpec(task="digits").resolved().probes.power_iterations == 2
    assert RunSpec(task="adding").resolved().probes.power_iterations == 2
    given = RunSpec(task="conv-digits", probes=ProbeSpec(enabled=True, power_iterations=5)).resolved()
    assert given.probes.power_iterations == 5 and given.probes.enabled


def test_a_fork_must_train_past_its_step_even_when_steps_is_left_to_the_task():
    # steps left out resolves to the task's default (digits: 300): a parent step beyond it is refused at
    # the edge, not stored and then unreadable (the fuzzer found a stored spec the API could not list)
    past = TASKS["digits"].steps + 10
    with pytest.raises(ValidationError, match=f"must train past it: set steps above {past}"):
        RunSpec(task="digits", norm="layer", parent={"id": "abc", "step": past})
    ok = RunSpec(task="digits", norm="layer", parent={"id": "abc", "step": TASKS["digits"].steps - 1})
    assert ok.resolved().steps == TASKS["digits"].steps
