"""`normlab reproduce`: one JSON object with --json, a side-by-side table, and user mistakes -> exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from normlab.cli import main
from normlab.presets import PRESETS
from normlab.tuning import Tuning


def test_json_prints_one_object_with_every_run_side_by_side(data_dir, capsys):
    assert main(["reproduce", "online", "--seeds", "0,3", "--steps", "2", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)  # exactly one JSON object on stdout (progress goes to stderr)
    assert out["preset"] == "online" and out["seeds"] == [0, 3] and out["steps"] == 2
    assert out["command"] == "normlab reproduce online --seeds 0,3 --steps 2 --json"
    assert [r["label"] for r in out["runs"]] == list(PRESETS["online"].run_labels())
    for run in out["runs"]:
        assert {"mean", "std", "values", "seeds", "statuses", "curve", "spec"} <= set(run)
        assert len(run["values"]) == 2 and run["seeds"] == [0, 3]
        assert {"steps", "mean", "at", "auc"} <= set(run["curve"])
        assert run["spec"]["steps"] == 2 and run["spec"]["batch_size"] == 1
    direction = out["direction"]
    assert {"claims", "holds", "all_seeds"} <= set(direction)
    assert all({"claim", "holds", "all_seeds"} <= set(c) for c in direction["claims"])
    assert captured.err.count("seed") == 4  # one progress line per (run, seed)


def test_table_names_each_run_and_the_verdict(data_dir, capsys):
    assert main(["reproduce", "fig6-batch4", "--seeds", "0", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "mean ± std" in out and "Direction:" in out
    assert any(line.strip().startswith("layer ") for line in out.splitlines())
    assert "layer better than batch" in out and "rule: " in out and "Δ = " in out


def test_unknown_preset_exits_2_and_lists_the_presets(capsys):
    assert main(["reproduce", "fig7"]) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'fig7'" in err
    assert all(name in err for name in PRESETS)


@pytest.mark.parametrize(
    "argv", [["--seeds", "0,x"], ["--seeds", "1,1"], ["--steps", "0"], ["--threads", "0"], ["--jobs", "0"]]
)
def test_bad_options_exit_2_with_a_message(argv, capsys):
    assert main(["reproduce", "online", *argv]) == 2
    assert capsys.readouterr().err.startswith("normlab reproduce: ")


def test_tune_prints_the_tuning_table_then_both_verdicts(data_dir, capsys, monkeypatch):
    rule = Tuning("lr", (3e-4, 3e-3), seeds=(100, 101))
    monkeypatch.setitem(PRESETS, "online", dataclasses.replace(PRESETS["online"], tuning=rule))
    argv = ["reproduce", "online", "--tune", "--seeds", "0,1", "--steps", "2", "--jobs", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.index("Tuning (lr; rule: each run at the learning rate from {0.0003, 0.003}") == 0
    assert out.count("← chosen") == 2  # one value per run
    assert "Same hyperparameters" in out and "Direction at the tuned setting:" in out
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["command"].endswith("--tune --json") and len(got["tuning"]["table"]) == 4
    assert got["same_hyperparameters"]["runs"][0]["spec"]["lr"] == 3e-4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["online", "--tune"], "declares no tuning rule; presets with one: "),
        (["pixel-digits", "--tune", "--seeds", "0,101"], "must not include the tuning seeds"),
    ],
)
def test_tune_mistakes_exit_2_with_a_message(argv, message, capsys):
    assert main(["reproduce", *argv]) == 2
    assert message in capsys.readouterr().err


def test_fresh_seeds_are_drawn_at_run_time_recorded_and_judged_beside_the_declared(data_dir, capsys):
    argv = ["reproduce", "online", "--seeds", "0,1", "--fresh-seeds", "2", "--steps", "2", "--jobs", "1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fresh = out["fresh_seeds"]
    assert len(fresh) == 2 and len(set(fresh)) == 2 and all(10_000 <= s < 2**31 for s in fresh)
    assert out["fresh"]["seeds"] == fresh and out["seeds"] == [0, 1]
    assert all(r["seeds"] == fresh for r in out["fresh"]["runs"])
    assert all(r["seeds"] == [0, 1] for r in out["runs"])
    assert [c["claim"] for c in out["fresh"]["direction"]["claims"]] == [
        c["claim"] for c in out["direction"]["claims"]
    ]
    assert out["command"].endswith("--fresh-seeds 2 --json")
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "Replication on fresh seeds " in table and "Direction on the fresh seeds:" in table


@pytest.mark.parametrize("k", ["0", "9"])
def test_a_bad_fresh_seed_count_exits_2(k, capsys):
    assert main(["reproduce", "online", "--fresh-seeds", k]) == 2
    assert "fresh-seeds" in capsys.readouterr().err
