"""The "where does it help?" map's aggregation: Δ = A − B paired by seed, its paired SE, the side it
favours, and points that stay empty until their runs end; the map presets expand into valid runs."""

from __future__ import annotations

import math

import pytest

from normlab.arms import SeedRecord, aggregate
from normlab.claims import Z
from normlab.maps import ScaleMap, map_points, side
from normlab.presets import PRESETS, map_preset
from normlab_client.group_models import CellResult
from normlab_client.spec import RunSpec

BATCH_MAP = ScaleMap("batch_size", (2, 4, 16, 128), "layer", "batch")


def arm(label: str, values: dict[int, float | None], metric: str = "val_loss") -> CellResult:
    records: list[SeedRecord] = [
        {"seed": s, "status": "completed", "value": v, "curve": [(10, v)], "wall_time": 1.0, "message": None}
        for s, v in values.items()
    ]
    return aggregate(label, {}, records, metric)


def cells_for(
    finals: dict[tuple[str, int], dict[int, float | None]], metric: str = "val_loss"
) -> dict[str, CellResult]:
    return {
        BATCH_MAP.label(norm, value): arm(BATCH_MAP.label(norm, value), seeds, metric)
        for (norm, value), seeds in finals.items()
    }


FINALS = {
    ("layer", 2): {0: 0.30, 1: 0.32, 2: 0.28, 3: 0.31, 4: 0.29},
    ("batch", 2): {0: 0.50, 1: 0.45, 2: 0.55, 3: 0.52, 4: 0.48},
    ("layer", 16): {0: 0.30, 1: None, 2: 0.30, 3: 0.32, 4: 0.30},  # seed 1 diverged
    ("batch", 16): {0: 0.40, 1: 0.40, 2: 0.40, 3: 0.40, 4: 0.40},
    ("layer", 128): {0: 0.30, 1: 0.31, 2: 0.29, 3: 0.30, 4: 0.30},
    ("batch", 128): {0: 0.31, 1: 0.30, 2: 0.30, 3: 0.29, 4: 0.30},
}


def test_each_point_is_the_paired_mean_difference_with_its_standard_error():
    m = map_points(BATCH_MAP, cells_for(FINALS), "val_loss")
    assert [p.value for p in m.points] == [2, 4, 16, 128]
    assert m.claim_side == "below" and (m.a, m.b, m.axis_name) == ("layer", "batch", "batch")
    p2, p4, p16, p128 = m.points
    # batch 2: differences −0.20 −0.13 −0.27 −0.21 −0.19: mean −0.20, squared deviations sum 0.01
    assert p2.per_seed == pytest.approx([-0.20, -0.13, -0.27, -0.21, -0.19])
    assert p2.difference == pytest.approx(-0.20) and p2.n == 5
    assert p2.se == pytest.approx(math.sqrt(0.01 / 4) / math.sqrt(5))
    assert p2.favours == "a"
    # batch 4: no run has ended, so the point is empty (it fills in later)
    assert p4.n == 0 and p4.difference is None and p4.favours is None
    # batch 16: the diverged seed drops out of the pairs; every pair is −0.10 except one at −0.08
    assert p16.n == 4 and p16.difference == pytest.approx(-0.095)
    assert p16.favours == "a"
    # batch 128: differences −0.01 +0.01 −0.01 +0.01 0: mean 0, within the noise
    assert p128.difference == pytest.approx(0.0, abs=1e-12) and p128.favours == "neither"


def test_higher_is_better_metrics_put_the_claim_above_zero():
    finals = {k: {s: 1 - v for s, v in seeds.items() if v is not None} for k, seeds in FINALS.items()}
    m = map_points(BATCH_MAP, cells_for(finals, "accuracy"), "accuracy")
    assert m.claim_side == "above"
    assert m.points[0].difference == pytest.approx(0.20) and m.points[0].favours == "a"


def test_the_side_needs_more_than_z_standard_errors():
    assert side(-0.3, 0.1, lower_is_better=True) == "a"
    assert side(-Z * 0.1, 0.1, lower_is_better=True) == "neither"  # exactly at the border: not beyond it
    assert side(0.5, 0.1, lower_is_better=True) == "b"
    assert side(0.5, 0.1, lower_is_better=False) == "a"
    assert side(None, None, lower_is_better=True) is None


def test_a_map_refuses_an_axis_that_is_not_a_scale():
    with pytest.raises(ValueError, match="choose one of"):
        ScaleMap("norm", ("layer", "batch"), "layer", "batch")
    with pytest.raises(ValueError, match="distinct"):
        ScaleMap("seq_len", (16, 16), "layer", "none")


@pytest.mark.parametrize("name", [n for n, p in PRESETS.items() if p.scale_map])
def test_map_presets_run_a_and_b_at_every_axis_value(name):
    preset = PRESETS[name]
    m = preset.scale_map
    assert m is not None
    runs = dict(zip(preset.run_labels(), preset.runs, strict=True))
    assert len(runs) == 2 * len(m.values)
    for value in m.values:
        for norm in (m.a, m.b):
            spec = runs[m.label(norm, value)]
            assert spec.norm == norm and getattr(spec, m.axis) == value
            for key, own in m.side_spec(norm).items():
                assert getattr(spec, key) == own
    assert preset.public()["map"]["values"] == list(m.values)


def test_a_side_spec_sets_its_fields_on_that_side_only():
    m = ScaleMap("seq_len", (16, 64), "layer", "none", a_spec={"lr": 3e-2}, b_spec={"lr": 1e-2, "steps": 7})
    base = RunSpec(task="adding", cell="lstm", lr=1e-3, steps=20, eval_every=5)
    preset = map_preset("m", "m", "m", m, base, paper_ref="-", metric="val_loss")
    runs = dict(zip(preset.run_labels(), preset.runs, strict=True))
    for value in (16, 64):
        layer, none = runs[m.label("layer", value)], runs[m.label("none", value)]
        assert (layer.lr, layer.steps, layer.seq_len) == (3e-2, 20, value)
        assert (none.lr, none.steps, none.seq_len) == (1e-2, 7, value)
    assert preset.public()["map"]["a_spec"] == {"lr": 3e-2}
    assert base.lr == 1e-3  # the base spec is left as it was


def test_a_side_spec_cannot_set_the_norm_or_the_axis():
    with pytest.raises(ValueError, match="'seq_len'"):
        ScaleMap("seq_len", (16, 64), "layer", "none", a_spec={"seq_len": 8})
    with pytest.raises(ValueError, match="'norm'"):
        ScaleMap("seq_len", (16, 64), "layer", "none", b_spec={"norm": "batch"})


def test_at_least_two_maps_ln_vs_none_over_t_and_ln_vs_bn_over_batch():
    maps = {(p.scale_map.axis, p.scale_map.a, p.scale_map.b) for p in PRESETS.values() if p.scale_map}
    assert ("seq_len", "layer", "none") in maps and ("batch_size", "layer", "batch") in maps
