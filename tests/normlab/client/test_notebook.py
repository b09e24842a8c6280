"""docs/notebook.ipynb executed cell by cell (nbclient, a real kernel) against a real `normlab up`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow
NOTEBOOK = Path(__file__).resolve().parents[3] / "docs" / "notebook.ipynb"


def test_the_example_notebook_runs_against_a_real_server(lab, monkeypatch, tmp_path):
    monkeypatch.setenv("NORMLAB_URL", lab.url)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(NOTEBOOK.parents[1]), os.environ.get("PYTHONPATH")]))
    )
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "norm=layer" in html and "norm=none" in html  # the DataFrames of finals and arms
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.name == "stdout")
    assert printed.count("difference") == 3  # the preset's three claims, each with its effect
    assert "/embed/run/" in printed and "/embed/replay?runs=" in printed
    drawn = re.search(r"LiveFigure: (\d+) of (\d+) training-loss points drawn, last at step 1500", printed)
    assert drawn and drawn.group(1) == drawn.group(2), printed  # the widget got every point, live
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    figure = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert figure, "the plot cell showed no plotly figure"
    traces = figure[0]["data"]["application/vnd.plotly.v1+json"]["data"]
    assert len(traces) == 4 * 3 * 2  # 4 runs × 3 panels × (raw + smoothed)
