"""`Table1`: the paper's Table 1 (§5.1, invariance under re-scaling and re-centering) as computed.

The one contract for it: the engine (`workers/engine/invariance.py`) returns it, `normlab invariance
--json` prints it, `GET /api/invariance` serves it and the front end reads it. Torch-free. The table as
the paper prints it lives here too, carried only to say where the computation agrees with it.

The API never computes it (that needs torch): `computed_table()` reads the table the engine computed when
this tree was built, `normlab/table1.json`, written by `python -m normlab invariance --json >
normlab/table1.json`; tests/normlab/test_table1_computed.py recomputes it and fails when they differ.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, model_validator

Transform = Literal[
    "weight_matrix_rescaling",
    "weight_matrix_recentering",
    "weight_vector_rescaling",
    "dataset_rescaling",
    "dataset_recentering",
    "single_training_case_rescaling",
]
Method = Literal["batch", "weight", "layer", "rms", "none"]

# The paper's column order (the Literal's own: each name is written once).
TRANSFORMS: tuple[Transform, ...] = get_args(Transform)
METHODS: tuple[Method, ...] = get_args(Method)
PAPER_METHODS: tuple[Method, ...] = ("batch", "weight", "layer")  # the paper's rows; the rest are extra

TRANSFORM_NAMES: dict[Transform, str] = {
    "weight_matrix_rescaling": "Weight matrix re-scaling",
    "weight_matrix_recentering": "Weight matrix re-centering",
    "weight_vector_rescaling": "Weight vector re-scaling",
    "dataset_rescaling": "Dataset re-scaling",
    "dataset_recentering": "Dataset re-centering",
    "single_training_case_rescaling": "Single training case re-scaling",
}
METHOD_NAMES: dict[Method, str] = {
    "batch": "Batch norm",
    "weight": "Weight norm",
    "layer": "Layer norm",
    "rms": "RMSNorm",
    "none": "None",
}

# Table 1 exactly as the paper prints it (True = "Invariant", False = "No"). Text, not a result.
PAPER_TABLE1: dict[Method, dict[Transform, bool]] = {
    "batch": dict(zip(TRANSFORMS, (True, False, True, True, True, False), strict=True)),
    "weight": dict(zip(TRANSFORMS, (True, False, True, False, False, False), strict=True)),
    "layer": dict(zip(TRANSFORMS, (True, True, False, True, False, True), strict=True)),
}
# The one cell where the paper's prose ("all the normalization methods are invariant to re-scaling the
# dataset") and its table ("No" for weight normalization) disagree.
PROSE_CELL: tuple[Method, Transform] = ("weight", "dataset_rescaling")


class Table1Setup(BaseModel):
    """How the table was computed (sizes, precision), so a reader can redo it."""

    model_config = ConfigDict(extra="forbid")

    seed: int
    units: int
    inputs: int
    cases: int
    draws: int
    dtype: str
    eps: float
    compared: str
    weight_normalization_weights: str


class Table1(BaseModel):
    """Table 1 computed: for each method and transformation, invariant or not, and the measured largest
    absolute change of the layer's output (float64) that decided it."""

    model_config = ConfigDict(extra="forbid")

    # keyed by Method, and by the name of each registered normalizer measured (normlab_client.norms)
    methods: dict[str, dict[Transform, bool]]
    max_abs_diff: dict[str, dict[Transform, float]]
    tolerance: float
    paper_table1: dict[Method, dict[Transform, bool]]
    agrees_with_paper_table: dict[Method, dict[Transform, bool]]
    all_paper_cells_agree: bool
    notes: list[str]  # notes[0] speaks to the prose-vs-table cell (PROSE_CELL)
    setup: Table1Setup
    extra_methods: list[str]
    registered: list[str] = []  # the extra rows that are registered normalizers, not built-in ones

    @model_validator(mode="after")
    def _known_rows(self) -> Table1:
        """A row is a built-in method or a registered normalizer named as such, nothing else."""
        unknown = sorted((self.methods.keys() | self.max_abs_diff.keys()) - {*METHODS, *self.registered})
        if unknown:
            raise ValueError(f"rows {', '.join(unknown)}: neither a method of Table 1 nor registered")
        return self


class RegisteredRows(BaseModel):
    """Table 1's rows for the registered normalizers, measured by a worker at its start (the API cannot:
    it has no torch) and served with the built-in table: `<data_dir>/table1-registered.json`."""

    model_config = ConfigDict(extra="forbid")

    methods: dict[str, dict[Transform, bool]]
    max_abs_diff: dict[str, dict[Transform, float]]
    tolerance: float


REGISTERED_FILE = "table1-registered.json"


def with_registered(table: Table1, rows: RegisteredRows | None, names: list[str]) -> Table1:
    """The table with the measured rows of the registered normalizers `names` added as extra rows (a
    name not measured yet is left out)."""
    if rows is None:
        return table
    measured = [n for n in names if n in rows.methods and n not in table.methods]
    return table.model_copy(
        update={
            "methods": {**table.methods, **{n: rows.methods[n] for n in measured}},
            "max_abs_diff": {**table.max_abs_diff, **{n: rows.max_abs_diff[n] for n in measured}},
            "extra_methods": [*table.extra_methods, *measured],
            "registered": measured,
        }
    )


TABLE_FILE = "table1.json"


@functools.cache
def computed_table() -> Table1:
    """Table 1 as the engine computed it at build time (`normlab/table1.json`, see the module docstring)."""
    return Table1.model_validate_json(resources.files("normlab").joinpath(TABLE_FILE).read_text())
