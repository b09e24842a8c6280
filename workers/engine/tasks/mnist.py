"""Permutation-invariant MNIST (from the user's IDX files) and MNIST-1D (shipped in normlab)."""

from __future__ import annotations

import gzip
import struct
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from normlab.settings import Settings
from normlab_client.catalog import MNIST_FILES, TASKS, mnist_dir
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import TaskData, TaskUnavailable, seeded
from workers.engine.tasks.shipped import shipped

# IDX type byte -> numpy big-endian dtype (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT")
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Path | str) -> np.ndarray:
    """The array stored in one IDX file (raw, or gzip-compressed when the name ends in .gz)."""
    path = Path(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    dtype, ndim = np.dtype(_IDX_DTYPES[raw[2]]), raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = raw[4 + 4 * ndim :]
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(body) != expected:
        raise ValueError(f"{path}: header says shape {shape} ({expected} bytes) but {len(body)} bytes follow")
    return np.frombuffer(body, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))


def _find(folder: Path, stem: str) -> Path:
    for name in (stem, f"{stem}.gz"):
        if (folder / name).exists():
            return folder / name
    raise TaskUnavailable(
        f"MNIST IDX file {stem} (raw or .gz) not found in {folder}; put the four MNIST "
        f"files there ({', '.join(MNIST_FILES)}), or choose task 'digits' or 'mnist1d'."
    )


@lru_cache(maxsize=2)
def _raw_mnist(folder: Path, stamp: tuple) -> dict[str, np.ndarray]:
    arrays = {stem: read_idx(_find(folder, stem)) for stem in MNIST_FILES}
    for kind in ("train", "t10k"):
        images, labels = arrays[f"{kind}-images-idx3-ubyte"], arrays[f"{kind}-labels-idx1-ubyte"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(
                f"MNIST {kind} files in {folder} disagree: images {images.shape}, labels {labels.shape}"
            )
    return arrays


def _split_train_val(
    x: np.ndarray, y: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, seed: int, val_fraction: float
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Training cases split into train/val from the seed, the published test set kept as the test split;
    every split standardized per feature with the training split's statistics (float32, in place, so
    MNIST's 55 000 × 784 is copied once, not four times)."""
    perm = torch.randperm(len(y), generator=seeded(seed, 1)).numpy()
    n_val = max(1, int(round(val_fraction * len(y))))
    parts = {
        "train": (x[perm[n_val:]], y[perm[n_val:]]),
        "val": (x[perm[:n_val]], y[perm[:n_val]]),
        "test": (x_test, y_test),
    }
    # astype copies, so standardizing in place never touches the cached raw arrays
    parts = {k: (a.astype(np.float32), b.astype(np.int64)) for k, (a, b) in parts.items()}
    mean = parts["train"][0].mean(0, dtype=np.float64).astype(np.float32)
    std = parts["train"][0].std(0, dtype=np.float64).astype(np.float32)
    std[std <= 1e-6] = 1.0  # constant pixels (MNIST's border) stay 0 instead of NaN
    for a, _ in parts.values():
        a -= mean
        a /= std
    return {k: (torch.from_numpy(a), torch.from_numpy(b)) for k, (a, b) in parts.items()}


@lru_cache(maxsize=1)
def _mnist_splits(folder: Path, stamp: tuple, seed: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The standardized splits for one seed, kept for the next run of the same seed (a sweep, a preset);
    runs only read them (batches are copies), so sharing is safe."""
    raw = _raw_mnist(folder, stamp)

    def flat(kind: str) -> tuple[np.ndarray, np.ndarray]:
        images = raw[f"{kind}-images-idx3-ubyte"]  # uint8 0..255; standardizing makes the scale moot
        return images.reshape(len(images), -1), raw[f"{kind}-labels-idx1-ubyte"]

    return _split_train_val(*flat("train"), *flat("t10k"), seed, val_fraction=1 / 12)


def load_mnist(spec: RunSpec, settings: Settings) -> TaskData:
    """mnist: 784 standardized pixels per case; 1/12 of the 60 000 training images held out for val."""
    folder = mnist_dir(settings.data_dir)
    paths = [_find(folder, stem) for stem in MNIST_FILES]
    stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
    parts = _mnist_splits(folder, stamp, spec.seed)
    return TaskData(
        info=TASKS["mnist"],
        input_dim=parts["train"][0].shape[1],
        n_outputs=10,
        splits={"val": parts["val"], "test": parts["test"]},
        train=parts["train"],
        notes=[
            f"mnist: {len(parts['train'][1])} train / {len(parts['val'][1])} val / "
            f"{len(parts['test'][1])} test images from {folder}."
        ],
    )


def _raw_mnist1d() -> dict[str, np.ndarray]:
    """MNIST-1D as mnist1d.make_dataset generates it with its default arguments (seed 42), shipped."""
    return shipped("mnist1d")


def load_mnist1d(spec: RunSpec, settings: Settings) -> TaskData:
    """mnist1d: 40 features per case; 4000 train cases split 3400/600 train/val from the seed, 1000 test."""
    raw = _raw_mnist1d()
    parts = _split_train_val(raw["x"], raw["y"], raw["x_test"], raw["y_test"], spec.seed, val_fraction=0.15)
    return TaskData(
        info=TASKS["mnist1d"],
        input_dim=parts["train"][0].shape[1],
        n_outputs=10,
        splits={"val": parts["val"], "test": parts["test"]},
        train=parts["train"],
        notes=[
            f"mnist1d: {len(parts['train'][1])} train / {len(parts['val'][1])} val / "
            f"{len(parts['test'][1])} test cases (mnist1d's default generation, shipped in normlab)."
        ],
    )
