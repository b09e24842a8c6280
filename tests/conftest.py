"""Fixtures shared across the test tree."""

import pytest

from normlab.settings import get_settings


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """Point the process's settings (read from the environment) at a private, empty data dir.

    No MNIST files are there, so `mnist` is unavailable; kernels use the torch path.
    """
    monkeypatch.setenv("NORMLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("NORMLAB_KERNEL_BACKEND", "torch")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()
