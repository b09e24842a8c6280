"""Fixtures shared across the test tree."""

import pytest


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """Point the settings an edge reads from the environment (the CLI, `Settings()`) at a private,
    empty data dir.

    No MNIST files are there, so `mnist` is unavailable; kernels use the torch path.
    """
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NORMLAB_KERNEL_BACKEND", "torch")
    yield tmp_path
