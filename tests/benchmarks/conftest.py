"""Fixtures for the benchmarks' tests: the settings a benchmark's edge passes to the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from normlab.settings import Settings


@pytest.fixture(scope="session")
def engine_data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("normlab-bench-data")


@pytest.fixture
def settings(engine_data_dir) -> Settings:
    return Settings(data_dir=engine_data_dir, kernel_backend="torch")
