"""Shared fixtures for the engine's tests: tiny MNIST IDX files and settings whose data dir holds them
(`settings` itself, with a private data dir, is tests/workers/conftest.py's)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from normlab.settings import Settings

TINY_MNIST = {"train": 60, "t10k": 20}  # images per file


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> Path:
    """Write `array` (uint8) as an IDX file, the format MNIST ships in; .gz when `compress`."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(raw))
    else:
        path.write_bytes(raw)
    return path


def write_tiny_mnist(data_dir: Path, compress: bool = False, seed: int = 0) -> Path:
    """Four tiny MNIST-format files in <data_dir>/mnist; each label's images are bright in one region."""
    rng = np.random.default_rng(seed)
    folder = data_dir / "mnist"
    folder.mkdir(parents=True, exist_ok=True)
    for kind, n in TINY_MNIST.items():
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 60, (n, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            images[i, 2 * label : 2 * label + 3, :] = 250  # learnable, so a short run can make progress
        write_idx(folder / f"{kind}-images-idx3-ubyte", images, compress)
        write_idx(folder / f"{kind}-labels-idx1-ubyte", labels, compress)
    return folder


@pytest.fixture(scope="session")
def mnist_settings(tmp_path_factory) -> Settings:
    """Settings whose data dir holds tiny MNIST IDX files (gzip-compressed)."""
    data_dir = tmp_path_factory.mktemp("normlab-mnist")
    write_tiny_mnist(data_dir, compress=True)
    return Settings(data_dir=data_dir, kernel_backend="torch")


@pytest.fixture
def idx_writer():
    """`write_idx(path, array, compress=False) -> Path` (conftest modules are not importable by name)."""
    return write_idx


@pytest.fixture
def tiny_mnist_writer():
    """`write_tiny_mnist(data_dir, compress=False, seed=0) -> folder`."""
    return write_tiny_mnist
