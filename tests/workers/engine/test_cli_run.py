"""`normlab run`: options generated from RunSpec, --json output, and user mistakes answered with exit 2."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

import pytest

from normlab.cli import main
from normlab.cli.run import add_spec_options, spec_from_args
from normlab_client.spec import LINEAGE_FIELDS, ProbeSpec, RunSpec


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_spec_options(parser)
    return parser


def test_every_spec_and_probe_field_is_an_option():
    flags = {s for a in _parser()._actions for s in a.option_strings}
    for name in RunSpec.model_fields:
        if name != "probes" and name not in LINEAGE_FIELDS:  # a fork's parent, a run's interventions
            assert "--" + name.replace("_", "-") in flags
    for name in ProbeSpec.model_fields:
        assert ("--probes" if name == "enabled" else "--probe-" + name.replace("_", "-")) in flags


def test_options_become_the_spec_and_omitted_ones_keep_the_defaults():
    args = _parser().parse_args(
        [
            "--task",
            "adding",
            "--cell",
            "gru",
            "--seq-len",
            "30",
            "--lr",
            "0.01",
            "--probes",
            "--probe-hessian",
            "--probe-trace-every",
            "7",
        ]
    )
    spec = spec_from_args(args)
    assert (spec.task, spec.cell, spec.seq_len, spec.lr) == ("adding", "gru", 30, 0.01)
    assert spec.probes.enabled and spec.probes.hessian and spec.probes.trace_every == 7
    assert spec.batch_size == RunSpec.model_fields["batch_size"].default and spec.steps is None


def test_json_prints_exactly_one_object_with_the_resolved_spec(data_dir, capsys):
    rc = main(
        [
            "run",
            "--task",
            "digits",
            "--norm",
            "layer",
            "--batch-size",
            "16",
            "--steps",
            "6",
            "--hidden-size",
            "16",
            "--eval-every",
            "3",
            "--seed",
            "2",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    result = json.loads(out)  # the whole of stdout is one JSON document
    assert out.strip().count("\n") == 0
    assert {"spec", "status", "metrics", "wall_time", "device", "kernel_backend"} <= set(result)
    assert "probes" not in result
    assert result["status"] == "completed" and result["step"] == 6
    spec = RunSpec(**result["spec"])  # resolved: defaults filled in, and it round-trips
    assert spec.lr is not None and spec.layers is not None and (spec.batch_size, spec.seed) == (16, 2)
    assert math.isfinite(result["metrics"]["test_accuracy"]) and result["wall_time"] > 0
    assert result["device"] == "cpu" and result["kernel_backend"] == "torch"
    assert "6/6" in err  # the progress bar went to stderr


def test_json_carries_the_probes_section_when_they_are_enabled(data_dir, capsys):
    rc = main(["run", "--task", "digits", "--steps", "2", "--hidden-size", "8", "--probes", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0 and result["spec"]["probes"]["enabled"] is True and "probes" in result


def test_summary_without_json_names_status_and_metrics(data_dir, capsys):
    rc = main(["run", "--task", "conv-digits", "--steps", "3", "--hidden-size", "4", "--layers", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "completed" in out and "test_accuracy" in out


def test_batchnorm_at_batch_size_one_exits_2_with_the_spec_message_and_no_traceback(data_dir):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "normlab",
            "run",
            "--task",
            "digits",
            "--norm",
            "batch",
            "--batch-size",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "batch size" in proc.stderr and "(got 1)" in proc.stderr and "'layer'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--task", "mnist"], "mnist"),  # the data set is not in the data dir
        (["--lr", "0"], "--lr"),
        (["--task", "digits", "--cell", "lstm"], "not sequential"),
        (["--probe-budget", "0.5"], "add --probes"),
    ],
)
def test_user_mistakes_exit_2_with_a_message(data_dir, capsys, argv, needle):
    assert main(["run", *argv]) == 2
    out, err = capsys.readouterr()
    assert needle in err and out == "" and "Traceback" not in err
    if argv[1] == "mnist":
        assert str(data_dir / "mnist") in err


def test_run_help_lists_every_spec_option_even_with_a_percent_sign_in_its_description(capsys):
    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--ln-position {pre,post}" in out and "--weight-standardization" in out
    assert "every 10 % of the run" in out  # checkpoint_every's description, printed as written
