"""Table 1 (§5.1) computed by the engine equals the paper's table; `normlab invariance` prints it."""

from __future__ import annotations

import json

import pytest

import workers.engine.invariance as inv
from normlab.cli import main as cli_main
from normlab.table1 import Table1
from workers.engine.norms import PlainLinear

KEYS = [
    "weight_matrix_rescaling",
    "weight_matrix_recentering",
    "weight_vector_rescaling",
    "dataset_rescaling",
    "dataset_recentering",
    "single_training_case_rescaling",
]

# Table 1 as printed (Invariant = True), typed in here from the paper independently of the module.
PRINTED = {
    "batch": [True, False, True, True, True, False],
    "weight": [True, False, True, False, False, False],
    "layer": [True, True, False, True, False, True],
}


@pytest.fixture(scope="module")
def table():
    return inv.compute_table1(seed=0)


def test_shape_and_keys(table):
    assert set(table.methods) == {"batch", "weight", "layer", "rms", "none"}
    for method in table.methods:
        assert list(table.methods[method]) == KEYS
        assert list(table.max_abs_diff[method]) == KEYS
    assert table.tolerance == inv.DEFAULT_TOL


def test_eighteen_cells_equal_the_printed_table(table):
    # The computation decides. It agrees with all 18 printed cells; the one place where the paper
    # contradicts itself is the prose claim "all normalization methods are invariant to re-scaling the
    # dataset": computed, weight normalization is NOT invariant to it (σ = ‖v‖ ignores the data) — the
    # table is right and the prose is wrong, asserted explicitly below.
    for method, row in PRINTED.items():
        assert [table.methods[method][k] for k in KEYS] == row, method
    assert table.all_paper_cells_agree is True
    assert table.methods["weight"]["dataset_rescaling"] is False
    note = table.notes[0]
    assert "not invariant" in note and "sides with Table 1, not the prose" in note


def test_decisions_have_wide_margins(table):
    # invariant cells are equal to rounding; the others differ by far more than the tolerance
    for method, row in table.methods.items():
        for k, invariant in row.items():
            d = table.max_abs_diff[method][k]
            assert (d < 1e-12) if invariant else (d > 1e-3), (method, k, d)


def test_extra_rows_follow_their_definitions(table):
    rms, none = table.methods["rms"], table.methods["none"]
    # RMSNorm re-scales per case without re-centring: scale-invariant like LN, shift-sensitive
    assert rms["weight_matrix_rescaling"] and rms["single_training_case_rescaling"]
    assert not rms["weight_matrix_recentering"]
    assert not any(none.values())


@pytest.mark.parametrize("seed", [1, 2])
def test_same_answer_for_other_seeds(table, seed):
    assert inv.compute_table1(seed=seed).methods == table.methods


def test_it_is_computed_not_copied(monkeypatch):
    # swap LayerNorm's layer for an unnormalized one: the 'layer' row must change to all "No"
    real = inv._layer
    monkeypatch.setattr(
        inv, "_layer", lambda m: PlainLinear(inv.INPUTS, inv.UNITS) if m == "layer" else real(m)
    )
    result = inv.compute_table1(seed=0)
    assert not any(result.methods["layer"].values())
    assert result.all_paper_cells_agree is False


def test_cli_json_is_one_object(capsys):
    assert cli_main(["invariance", "--json"]) == 0
    text = capsys.readouterr().out
    data = json.loads(text)
    assert data["methods"]["layer"]["weight_matrix_recentering"] is True
    assert Table1.model_validate_json(text) == inv.compute_table1(seed=0)  # the one contract, round-trip


def test_cli_human_table(capsys):
    assert cli_main(["invariance"]) == 0
    out = capsys.readouterr().out
    assert "Invariant" in out and "layer" in out and "Note:" in out


def test_cli_rejects_bad_tolerance(capsys):
    assert cli_main(["invariance", "--tol", "0"]) == 2
    assert "--tol must be positive" in capsys.readouterr().err
