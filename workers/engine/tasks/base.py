"""`TaskData`: a loaded task — an endless training stream, fixed val/test splits, its loss and metrics.

Every task module builds one of these; the training loop only ever talks to this interface:

    data.info                      the catalog's TaskInfo (kind, target, metric, defaults)
    data.input_dim, data.n_outputs what `build_model` needs
    data.train_batches(B, gen)     endless iterator of (x, y) drawn with the torch.Generator `gen`
    data.split("val" | "test")     the fixed (x, y) of that split (sequence tasks: at eval_seq_len)
    data.loss(outputs, y)          mean scalar loss (the quantity that is differentiated)
    data.metrics(outputs, y)       {"loss": …, plus "accuracy" | "bpc" | "mse"} as floats

Inputs are float tensors: flat (B, D); image (B, 1, 8, 8); sequence (B, T, D) (one-hot for symbols).
Targets are long class ids (per case, or per step with IGNORE where a step is not scored) or floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab_client.catalog import TaskInfo
from normlab_client.spec import RunSpec

IGNORE = -100  # per-step target of a step that is not scored (cross_entropy's ignore_index)

Batch = tuple[Tensor, Tensor]


class TaskUnavailable(RuntimeError):
    """The task's data is not on this machine; the message says where to put it."""


def seeded(seed: int, stream: int) -> torch.Generator:
    """A CPU generator for one named random stream of a run (splits, val data, test data, batches…)."""
    return torch.Generator().manual_seed((seed << 8) | stream)


class BatchStream:
    """An endless stream of training batches whose position can be saved and restored exactly."""

    def __init__(self, data: TaskData, batch_size: int, generator: torch.Generator):
        self.data, self.batch_size, self.generator = data, batch_size, generator
        self.order = torch.empty(0, dtype=torch.long)  # fixed arrays: this epoch's cases still to come

    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> Batch:
        if self.data.sample is not None:
            return self.data.sample(self.batch_size, self.generator)
        assert self.data.train is not None
        x, y = self.data.train
        # shuffled epochs, so every case is seen once per epoch; a batch may straddle two epochs
        while len(self.order) < self.batch_size:
            self.order = torch.cat([self.order, torch.randperm(len(y), generator=self.generator)])
        idx, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
        return x[idx], y[idx]

    def state_dict(self) -> dict[str, Tensor]:
        return {"generator": self.generator.get_state(), "order": self.order.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.generator.set_state(state["generator"])
        self.order = state["order"].clone()


@dataclass
class TaskData:
    """A loaded task. Construct with `sample` (one training batch) or `train` (fixed arrays)."""

    info: TaskInfo
    input_dim: int
    n_outputs: int
    splits: dict[str, Batch]
    train: Batch | None = None  # fixed training arrays, sampled in shuffled epochs
    sample: Callable[[int, torch.Generator], Batch] | None = None  # or fresh batches each step
    seq_len: int | None = None  # time steps T of a training sequence (copy: the delay + 20)
    eval_seq_len: int | None = None  # time steps T of a val/test sequence
    notes: list[str] = field(default_factory=list)  # facts worth a `log` event (sizes, sources)
    # a task's own loss on the per-step outputs (target 'density': a mixture density, nats per step)
    loss_fn: Callable[[Tensor, Tensor], Tensor] | None = None
    # a task's own metrics on a whole split's outputs (e.g. recall@K, which ranks every case against all)
    metrics_fn: Callable[[Tensor, Tensor], dict[str, float]] | None = None
    # a task whose model is part of the task (DRAW's VAE, the retrieval encoders): built from the spec
    model_fn: Callable[[RunSpec], nn.Module] | None = None

    def train_batches(self, batch_size: int, generator: torch.Generator) -> BatchStream:
        """Endless (x, y) training batches; the same generator state gives the same batches. The stream's
        `state_dict()` (generator and the epoch's remaining order) is what a checkpoint keeps."""
        return BatchStream(self, batch_size, generator)

    def split(self, name: str) -> Batch:
        """The fixed (x, y) of split 'val' or 'test'."""
        if name not in self.splits:
            raise KeyError(f"unknown split {name!r}; use one of {', '.join(self.splits)}")
        return self.splits[name]

    @property
    def train_size(self) -> int | None:
        return None if self.train is None else len(self.train[1])

    # -- loss and metrics: chosen by the catalog's target kind --------------------------------

    def _scored(self, outputs: Tensor) -> Tensor:
        """Sequence models give per-step outputs (B, T, C); per-case targets read the last step."""
        if self.info.target != "per_step_class" and outputs.dim() == 3:
            outputs = outputs[:, -1]
        return outputs

    def loss(self, outputs: Tensor, y: Tensor) -> Tensor:
        """The mean loss over the batch (cross-entropy in nats, or squared error)."""
        if self.loss_fn is not None:
            return self.loss_fn(outputs, y)
        out = self._scored(outputs)
        if self.info.target == "regression":
            return F.mse_loss(out.reshape(-1).float(), y.reshape(-1).float())
        if self.info.target == "per_step_class":
            return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1), ignore_index=IGNORE)
        return F.cross_entropy(out.float(), y)

    @torch.no_grad()
    def metrics(self, outputs: Tensor, y: Tensor) -> dict[str, float]:
        """{"loss": …} plus the catalog's metric: "accuracy" (0..1), "bpc" (loss / ln 2), "mse",
        "nll", or the task's own (metrics_fn: "recall")."""
        if self.metrics_fn is not None:
            return self.metrics_fn(outputs, y)
        loss = float(self.loss(outputs, y))
        out: dict[str, float] = {"loss": loss}
        metric = self.info.metric
        if metric == "bpc":
            out["bpc"] = loss / math.log(2)
        elif metric == "mse":
            out["mse"] = loss
        elif metric == "nll":
            out["nll"] = loss
        else:
            pred = self._scored(outputs).argmax(-1)
            scored = y != IGNORE
            out["accuracy"] = float((pred[scored] == y[scored]).float().mean())
        return out
