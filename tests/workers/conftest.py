"""Fixtures for the worker-side tests (engine, probes, worker): the settings a test's edge passes down."""

from __future__ import annotations

from pathlib import Path

import pytest

from normlab.settings import Settings


@pytest.fixture(scope="session")
def engine_data_dir(tmp_path_factory) -> Path:
    """One data dir per session (MNIST-1D's disk cache is written here once)."""
    return tmp_path_factory.mktemp("normlab-data")


@pytest.fixture
def settings(engine_data_dir) -> Settings:
    return Settings(data_dir=engine_data_dir, kernel_backend="torch")
