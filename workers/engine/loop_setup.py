"""What a run needs before its first step: device, threads, seeds, the model and the optimizer."""

from __future__ import annotations

import os
import random

import numpy as np
import torch
from torch import nn

from normlab.spec import RunSpec
from workers.engine.tasks import TaskData

_threads_checked = False


def pick_device(requested: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; 'cuda' without a GPU is a user error with a fix."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but this machine has no CUDA GPU; use device "
                           "'auto' or 'cpu'.")
    return torch.device(requested)


def limit_threads() -> int:
    """Keep torch's intra-op threads within the CPUs this process may run on (never raises the count,
    so an explicit torch.set_num_threads / OMP_NUM_THREADS stays in force). Returns the count."""
    global _threads_checked
    if not _threads_checked:
        try:
            allowed = len(os.sched_getaffinity(0))  # taskset / cgroup cpusets, not the whole machine
        except AttributeError:  # pragma: no cover - not Linux
            allowed = os.cpu_count() or 1
        if torch.get_num_threads() > allowed:
            torch.set_num_threads(allowed)
        _threads_checked = True
    return torch.get_num_threads()


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy and random: initialization is a function of the seed."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def build_model(spec: RunSpec, data: TaskData) -> nn.Module:
    """The task's default model (engine-nn's `build_model`), imported lazily so tasks load without it."""
    from workers.engine.models import build_model as build

    return build(spec, data.info, data.input_dim, data.n_outputs)


def make_optimizer(spec: RunSpec, model: nn.Module) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum; weight_decay is L2 added to the gradient (both optimizers)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if spec.optimizer == "adam":
        return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay)
    return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)


def make_prober(spec: RunSpec, model: nn.Module, data: TaskData,
                optimizer) -> tuple[object | None, str | None]:
    """(prober, None), or (None, why not) when the probes package is not installed or declines."""
    if not spec.probes.enabled:
        return None, None
    try:
        from workers.probes import make_prober as make
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("workers.probes"):
            return None, "probes were requested but workers.probes is not available; training without them."
        raise
    prober = make(spec, model, data, optimizer)
    return prober, (None if prober is not None else "the probes declined this model; training without them.")
