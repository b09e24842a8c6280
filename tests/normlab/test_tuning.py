"""normlab.tuning: the declared rule that chooses each run's setting on tuning seeds (torch-free)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from normlab.presets import PRESETS
from normlab.tuning import TUNING_SEEDS, Tuning, choose

GRID = (1e-3, 3e-3, 1e-2)


def test_each_run_takes_the_value_with_the_best_mean_over_the_tuning_seeds():
    t = Tuning("lr", GRID, seeds=(100, 101))
    finals = {
        "none": {1e-3: [0.5, 0.7], 3e-3: [0.4, 0.5], 1e-2: [0.9, 0.2]},  # means 0.6, 0.45, 0.55
        "layer": {1e-3: [0.5, 0.5], 3e-3: [0.3, 0.3], 1e-2: [0.2, 0.1]},  # means 0.5, 0.3, 0.15
    }
    out = choose(t, finals, "val_loss")
    assert out["chosen"] == {"none": 3e-3, "layer": 1e-2}
    rows = {(r["label"], r["value"]): r for r in out["table"]}
    assert len(rows) == 6 and rows["none", 1e-3]["mean"] == pytest.approx(0.6)
    assert rows["none", 3e-3]["chosen"] and not rows["none", 1e-2]["chosen"]
    assert rows["layer", 1e-2]["std"] == pytest.approx(math.sqrt(0.005))
    # higher is better for recall: the same numbers choose the other end
    assert choose(t, finals, "recall")["chosen"] == {"none": 1e-3, "layer": 1e-3}


def test_a_value_that_diverged_on_one_tuning_seed_ranks_below_every_finished_one():
    t = Tuning("lr", GRID, seeds=(100, 101))
    finals = {"none": {1e-3: [0.9, 0.9], 3e-3: [0.8, 0.8], 1e-2: [0.01, float("nan")]}}
    out = choose(t, finals, "val_loss")
    assert out["chosen"] == {"none": 3e-3}
    row = next(r for r in out["table"] if r["value"] == 1e-2)
    assert row["finished"] == 1 and not row["chosen"]
    # every value failed somewhere: the fewest failures first, then the mean
    finals = {"none": {1e-3: [None, None], 3e-3: [0.8, None], 1e-2: [0.5, None]}}
    assert choose(t, finals, "val_loss")["chosen"] == {"none": 1e-2}


def test_ties_go_to_the_earlier_grid_value():
    t = Tuning("lr", GRID, seeds=(100, 101))
    finals = {"none": {1e-3: [0.4, 0.6], 3e-3: [0.5, 0.5], 1e-2: [0.6, 0.4]}}
    assert choose(t, finals, "val_loss")["chosen"] == {"none": 1e-3}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"field": "steps", "grid": (100, 200)},
        {"field": "lr", "grid": (1e-3,)},
        {"field": "lr", "grid": (1e-3, 1e-3)},
        {"field": "lr", "grid": (1e-3, 1e-2), "seeds": (100,)},
        {"field": "lr", "grid": (1e-3, 1e-2), "per": "normalizer"},
    ],
)
def test_a_malformed_rule_is_refused(kwargs):
    with pytest.raises(ValueError):
        Tuning(**kwargs)


def test_tuning_seeds_never_decide_a_verdict():
    tuned = [p for p in PRESETS.values() if p.tuning]
    assert {"pixel-digits", "handwriting", "draw", "gain-init", "convnets", "fig6-batch128"} <= {
        p.name for p in tuned
    }
    for p in tuned:
        assert p.tuning is not None and not set(p.tuning.seeds) & set(p.seeds), p.name
        public = p.public()["tuning"]
        assert public["seeds"] == list(TUNING_SEEDS) and "never a verdict seed" in public["rule"]
    with pytest.raises(ValueError, match="never decide a verdict"):
        dataclasses.replace(PRESETS["pixel-digits"], seeds=(0, 1, 100))


def test_only_a_map_can_be_tuned_per_side():
    with pytest.raises(ValueError, match="only a map"):
        dataclasses.replace(PRESETS["pixel-digits"], tuning=Tuning("lr", (1e-3, 1e-2), per="side"))
    assert PRESETS["map-ln-none-seq-len"].public()["tuning"]["per"] == "side"
