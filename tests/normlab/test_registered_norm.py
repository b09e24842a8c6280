"""A normalizer registered from outside the package (examples/dyt_norm, Dynamic Tanh, loaded by
NORMLAB_PLUGINS) runs through a real `normlab up`: in the catalog, checked by the API, a preset run with it
in place of LayerNorm, and its Table 1 row measured by the worker."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.service import running_lab
from normlab_client import Client, NormlabError
from normlab_client.catalog import NORMS
from normlab_client.norms import register_norm
from normlab_client.spec import RunSpec

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dyt_norm"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(EXAMPLE)) if p)
    with running_lab(
        tmp_path_factory.mktemp("dyt-lab"), workers=1, pythonpath=path, plugins="dyt_norm"
    ) as lab:
        yield lab


def test_the_api_lists_and_checks_the_registered_normalizer(lab):
    catalog = httpx.get(lab.api("api/catalog"), timeout=30).json()
    tasks = {t["name"]: t for t in catalog["tasks"]}
    assert "Dynamic Tanh" in catalog["norms"]["dyt"]
    assert "dyt" in tasks["digits"]["norms"] and "dyt" in tasks["reverse"]["norms"]
    assert "dyt" not in tasks["conv-digits"]["norms"]  # a ConvNet's maps are not (cases, features)
    assert "dyt" not in tasks["adding"]["norms"]  # declared recurrent=False
    refused = httpx.post(lab.api("api/runs"), json={"task": "digits", "norm": "dyt2"}, timeout=30)
    assert refused.status_code == 422
    assert "Unknown normalizer 'dyt2'" in refused.json()["detail"] and "dyt" in refused.json()["detail"]


def test_a_preset_runs_with_it_in_place_of_layernorm(lab):
    with Client(lab.url) as c:
        group = c.preset("online", seeds=[0], steps=20, swap={"layer": "dyt"}).wait(
            progress=False, timeout=300
        )
        runs = {r.id: r.refresh() for r in group.runs}
        public = group.refresh()
        with pytest.raises(NormlabError) as exc:  # a map's arms are the map's own two normalizers
            c.preset("map-ln-bn-batch", seeds=[0], steps=5, swap={"layer": "dyt"})
    assert exc.value.status == 422 and exc.value.field == "swap"
    assert sorted(r.spec.norm for r in runs.values()) == ["dyt", "none"]
    assert all(r.status == "completed" for r in runs.values())
    assert [a.label for a in public.arms] == ["none", "dyt"]
    arm_of = {r.id: r.arm for r in public.runs}
    assert {runs[i].spec.norm: arm for i, arm in arm_of.items()} == {"dyt": "dyt", "none": "none"}
    judged = [c for c in public.claims or [] if c.kind == "trains"]
    assert judged and "dyt" in judged[0].claim  # the preset's claim about LN, judged for DyT


def test_its_table1_row_is_measured(lab):
    deadline = time.monotonic() + 60
    while True:  # the worker measures it at its start; `normlab up` waited for the worker to be warm
        table = httpx.get(lab.api("api/invariance"), timeout=30).json()
        if "dyt" in table["methods"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert table["registered"] == ["dyt"] and "dyt" in table["extra_methods"]
    # tanh(α·a)·γ + β has no statistics: every transformation of §5.1 changes W x, hence the output
    assert not any(table["methods"]["dyt"].values())
    assert min(table["max_abs_diff"]["dyt"].values()) > 1e3 * table["tolerance"]
    assert table["all_paper_cells_agree"] and table["methods"]["layer"]["weight_matrix_recentering"]


def test_register_norm_refuses_bad_declarations():
    with pytest.raises(ValueError, match="built-in"):
        register_norm("layer", "pkg.mod:Norm")
    with pytest.raises(ValueError, match="lowercase"):
        register_norm("My Norm", "pkg.mod:Norm")
    with pytest.raises(ValueError, match="import path"):
        register_norm("mine", "pkg.mod.Norm")
    assert "mine" not in NORMS
    with pytest.raises(ValueError, match="Unknown normalizer 'mine'"):
        RunSpec(task="digits", norm="mine")
