"""`normlab catalog`: the catalog as JSON and as text, with MNIST's availability read from the data dir."""

from __future__ import annotations

import json

from normlab.cli import main
from normlab_client.catalog import MNIST_FILES, NORMS, TASKS
from normlab_client.spec import RunSpec


def _catalog(capsys) -> dict:
    assert main(["catalog", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_catalog_json_lists_every_task_norm_and_field(data_dir, capsys):
    catalog = _catalog(capsys)
    assert [t["name"] for t in catalog["tasks"]] == list(TASKS)
    assert catalog["norms"] == NORMS
    assert set(RunSpec.model_fields) <= set(catalog["fields"])
    seq = {t["name"]: t["sequential"] for t in catalog["tasks"]}
    assert seq["adding"] and not seq["digits"]


def test_mnist_is_unavailable_until_its_files_are_in_the_data_dir(data_dir, capsys):
    mnist = next(t for t in _catalog(capsys)["tasks"] if t["name"] == "mnist")
    assert mnist["available"] is False and str(data_dir / "mnist") in mnist["unavailable_reason"]
    (data_dir / "mnist").mkdir()
    for stem in MNIST_FILES:
        (data_dir / "mnist" / f"{stem}.gz").write_bytes(b"")
    mnist = next(t for t in _catalog(capsys)["tasks"] if t["name"] == "mnist")
    assert mnist["available"] is True and mnist["unavailable_reason"] is None


def test_catalog_text_marks_unavailable_tasks(data_dir, capsys):
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in TASKS)
    assert "[unavailable:" in out and out.count("[unavailable:") == 1
