"""The data sets shipped in normlab (workers/engine/tasks/data): each array's checksum as SOURCES.md
records it, its shape and labels by the source's definition, and — where the package that used to carry
it is installed — equality with that package's own copy."""

from __future__ import annotations

import hashlib
import importlib.util
import re

import numpy as np
import pytest

from workers.engine.tasks.shipped import DATA, shipped


def _recorded() -> dict[tuple[str, str], tuple[str, str, str]]:
    rows = re.findall(
        r"^\| (\w+)\.npz \| (\w+) \| (\w+) \| ([\d×]+) \| ([0-9a-f]{64}) \|$",
        (DATA / "SOURCES.md").read_text(),
        re.MULTILINE,
    )
    return {(f, a): (dtype, shape, sha) for f, a, dtype, shape, sha in rows}


def test_every_shipped_array_matches_its_recorded_checksum_dtype_and_shape():
    recorded = _recorded()
    assert {f for f, _ in recorded} == {"digits", "mnist1d", "mnist5k"}
    for (name, key), (dtype, shape, sha) in recorded.items():
        a = shipped(name)[key]
        assert str(a.dtype) == dtype and "×".join(map(str, a.shape)) == shape, (name, key)
        assert hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() == sha, (name, key)
    assert sum(p.stat().st_size for p in DATA.glob("*.npz")) < 3_000_000  # small enough to ship


def test_shipped_arrays_fit_their_sources_definitions():
    d = shipped("digits")
    assert d["x"].shape == (1797, 64) and 0 == d["x"].min() and d["x"].max() == 16  # 8×8 counts 0..16
    assert sorted(set(d["y"].tolist())) == list(range(10))
    m = shipped("mnist5k")
    assert m["x"].shape == (5000, 784) and m["x"].max() == 255
    assert np.bincount(m["y"]).tolist() == [500] * 10  # 500 of each digit
    one = shipped("mnist1d")
    assert one["x"].shape == (4000, 40) and one["x_test"].shape == (1000, 40)
    assert sorted(set(one["y"].tolist())) == list(range(10))


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn not installed")
def test_digits_equal_scikit_learns():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    assert np.array_equal(shipped("digits")["x"], bunch.data) and np.array_equal(
        shipped("digits")["y"], bunch.target
    )


@pytest.mark.skipif(importlib.util.find_spec("mnist1d") is None, reason="mnist1d not installed")
def test_mnist1d_equals_a_fresh_generation_with_the_default_arguments():
    from mnist1d.data import get_dataset_args, make_dataset

    state = np.random.get_state()  # make_dataset reseeds numpy's global generator; put it back
    try:
        fresh = make_dataset(get_dataset_args())
    finally:
        np.random.set_state(state)
    for key in ("x", "y", "x_test", "y_test"):
        assert np.array_equal(shipped("mnist1d")[key], np.asarray(fresh[key])), key
