"""The scikit-learn 8×8 digits, three ways: flat MLP input, a row-by-row sequence, and (1, 8, 8) images."""

from __future__ import annotations

import numpy as np
import torch

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import TaskData, seeded
from workers.engine.tasks.shipped import shipped

SPLIT_FRACTIONS = (0.70, 0.15, 0.15)  # train / val / test
_SEQ_LEN = {"sequence": 8, "pixel": 64}
# flat: 64 pixels; sequence: 8 pixels per step; image: 1 input channel of 8×8
_INPUT_DIM = {"flat": 64, "sequence": 8, "pixel": 1, "image": 1}


def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    """(1797 × 64 pixels 0..16 as float32, int64 labels): scikit-learn's digits, shipped in normlab."""
    d = shipped("digits")
    return d["x"].astype(np.float32), d["y"].astype(np.int64)


def split_indices(n: int, seed: int, fractions=SPLIT_FRACTIONS) -> dict[str, torch.Tensor]:
    """A fixed train/val/test partition of range(n), drawn from the seed."""
    perm = torch.randperm(n, generator=seeded(seed, 1))
    n_train = int(round(fractions[0] * n))
    n_val = int(round(fractions[1] * n))
    return {"train": perm[:n_train], "val": perm[n_train : n_train + n_val], "test": perm[n_train + n_val :]}


def standardize(x: torch.Tensor, parts: dict[str, torch.Tensor], per_feature: bool) -> torch.Tensor:
    """Standardize with the training split's statistics only (per feature, or one global scalar)."""
    train = x[parts["train"]]
    if per_feature:
        mean, std = train.mean(0), train.std(0)
    else:
        mean, std = train.mean(), train.std()
    # pixels that are constant in training (the digits' border) have std 0: leave them at 0, not NaN
    return (x - mean) / torch.where(std > 1e-6, std, torch.ones_like(std))


def _load(spec: RunSpec, shape: str) -> TaskData:
    x_np, y_np = _raw_digits()
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    parts = split_indices(len(y), spec.seed)
    x = standardize(x, parts, per_feature=(shape == "flat"))
    if shape == "image":
        x = x.reshape(-1, 1, 8, 8)
    elif shape == "sequence":
        x = x.reshape(-1, 8, 8)  # T = 8 rows of D = 8 pixels
    elif shape == "pixel":
        x = x.reshape(-1, 64, 1)  # T = 64 pixels, one per step
    data = {k: (x[idx], y[idx]) for k, idx in parts.items()}
    info = TASKS[spec.task]
    return TaskData(
        info=info,
        input_dim=_INPUT_DIM[shape],
        n_outputs=10,
        splits={"val": data["val"], "test": data["test"]},
        train=data["train"],
        seq_len=_SEQ_LEN.get(shape),
        eval_seq_len=_SEQ_LEN.get(shape),
        notes=[
            f"{spec.task}: {len(parts['train'])} train / {len(parts['val'])} val / "
            f"{len(parts['test'])} test cases of scikit-learn's 8×8 digits "
            f"(split from seed {spec.seed})."
        ],
    )


def load_digits_task(spec: RunSpec, settings: Settings) -> TaskData:
    """digits: 64 standardized pixels per case for a permutation-invariant MLP."""
    return _load(spec, "flat")


def load_digits_mse(spec: RunSpec, settings: Settings) -> TaskData:
    """digits-mse: the flat digits with one-hot targets (B, 10) scored by squared error (the regression
    loss: mean over cases and outputs), the setting of Cohen et al.'s edge-of-stability runs."""
    data = _load(spec, "flat")

    def one_hot(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return batch[0], torch.nn.functional.one_hot(batch[1], 10).float()

    assert data.train is not None
    data.train = one_hot(data.train)
    data.splits = {k: one_hot(v) for k, v in data.splits.items()}
    data.notes.append("digits-mse: one-hot targets, loss and metric the mean squared error over 10 outputs.")
    return data


def load_seq_digits(spec: RunSpec, settings: Settings) -> TaskData:
    """seq-digits: each image read row by row, x (B, 8, 8) = (B, T, D)."""
    return _load(spec, "sequence")


def load_conv_digits(spec: RunSpec, settings: Settings) -> TaskData:
    """conv-digits: images (B, 1, 8, 8) for a small ConvNet."""
    return _load(spec, "image")


def load_pixel_digits(spec: RunSpec, settings: Settings) -> TaskData:
    """pixel-digits: each image read pixel by pixel, x (B, 64, 1) = (B, T, D)."""
    return _load(spec, "pixel")
