"""The small data sets that ship inside normlab (`data/*.npz`, written once by scripts/make_datasets.py;
sources, licences and checksums in data/SOURCES.md): read from the package, never downloaded, and with
no package to install for them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"


@lru_cache(maxsize=4)
def shipped(name: str) -> dict[str, np.ndarray]:
    """The arrays of data/<name>.npz ('digits', 'mnist1d', 'mnist5k'), as stored."""
    with np.load(DATA / f"{name}.npz") as z:
        return {k: z[k] for k in z.files}
