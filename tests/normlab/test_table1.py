"""The Table 1 contract (normlab/table1.py): the printed table as the paper has it, and a model that
refuses what is not Table 1."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from normlab.table1 import PAPER_TABLE1, PROSE_CELL, TRANSFORMS, Table1


def _table(**changes) -> dict:
    verdicts = {m: dict(row) for m, row in PAPER_TABLE1.items()}
    body = {
        "methods": verdicts,
        "max_abs_diff": {m: dict.fromkeys(TRANSFORMS, 0.0) for m in verdicts},
        "tolerance": 1e-9,
        "paper_table1": PAPER_TABLE1,
        "agrees_with_paper_table": {m: dict.fromkeys(TRANSFORMS, True) for m in verdicts},
        "all_paper_cells_agree": True,
        "notes": ["prose vs table"],
        "setup": {
            "seed": 0,
            "units": 8,
            "inputs": 6,
            "cases": 16,
            "draws": 3,
            "dtype": "float64",
            "eps": 1e-300,
            "compared": "outputs",
            "weight_normalization_weights": "v",
        },
        "extra_methods": [],
    }
    return body | changes


def test_printed_table_as_in_the_paper():
    # typed in from the paper's Table 1, row by row, independently of the module
    printed = {
        "batch": [True, False, True, True, True, False],
        "weight": [True, False, True, False, False, False],
        "layer": [True, True, False, True, False, True],
    }
    assert {m: [row[t] for t in TRANSFORMS] for m, row in PAPER_TABLE1.items()} == printed
    assert PAPER_TABLE1[PROSE_CELL[0]][PROSE_CELL[1]] is False  # the table's "No" that the prose contradicts


def test_model_round_trips_and_refuses_other_shapes():
    table = Table1.model_validate(_table())
    assert Table1.model_validate_json(table.model_dump_json()) == table
    with pytest.raises(ValidationError):  # the shape the front end used to guess at
        Table1.model_validate({"cells": [{"method": "layer", "transform": "x", "invariant": True}]})
    with pytest.raises(ValidationError):
        Table1.model_validate(_table(methods={"group": dict.fromkeys(TRANSFORMS, True)}))
    with pytest.raises(ValidationError):
        Table1.model_validate(_table(methods={"layer": {"data_scale": True}}))
