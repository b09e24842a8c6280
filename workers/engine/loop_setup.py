"""What a run needs before its first step: device, threads, seeds, the model and the optimizer."""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from normlab_client.spec import RunSpec
from workers.engine.options import DEFAULT, EngineOptions, apply_options
from workers.engine.tasks import TaskData

if TYPE_CHECKING:
    from workers.probes.prober import Prober

# torch's own choice when this module was imported: physical cores, or OMP_NUM_THREADS when set
_TORCH_DEFAULT_THREADS = torch.get_num_threads()
_threads_we_set: int | None = None
# Work per training step (FLOPs) that earns one more thread: on shared cores a step of the adding task's
# default LSTM (≈ 1.3e9 FLOPs) runs many times slower on 2 threads than on 1, so it stays on one.
FLOPS_PER_THREAD = 4e9


def pick_device(requested: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; 'cuda' without a GPU is a user error with a fix."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "device 'cuda' was requested but this machine has no CUDA GPU; use device 'auto' or 'cpu'."
        )
    return torch.device(requested)


def choose_threads(n_params: int, cases_per_step: int) -> int:
    """CPU threads for a run of this size; returns the count in force.

    The models here are small: on a shared machine one OpenMP thread per run is often many times faster
    than several spinning against other processes (a Celery host runs several runs at once, too). So threads
    grow with the work per step (≈ 6 · params · cases, cases = batch × time steps), capped by the CPUs
    this process may use and by torch's default.
    An explicit choice is respected: OMP_NUM_THREADS in the environment (the OpenMP runtime's own
    convention), or torch.set_num_threads called by the embedding program.
    """
    global _threads_we_set
    current = torch.get_num_threads()
    explicit = "OMP_NUM_THREADS" in os.environ or current not in (_TORCH_DEFAULT_THREADS, _threads_we_set)
    if explicit:
        return current
    try:
        allowed = len(os.sched_getaffinity(0))  # taskset / cgroup cpusets, not the whole machine
    except AttributeError:  # pragma: no cover - not Linux
        allowed = os.cpu_count() or 1
    wanted = max(1, int(6 * n_params * cases_per_step / FLOPS_PER_THREAD))
    threads = max(1, min(wanted, allowed, _TORCH_DEFAULT_THREADS))
    if threads != current:
        torch.set_num_threads(threads)
    _threads_we_set = threads
    return threads


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy and random: initialization is a function of the seed."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def build_model(spec: RunSpec, data: TaskData, options: EngineOptions = DEFAULT) -> nn.Module:
    """The task's own model (`data.model_fn`), else the task kind's default (engine-nn's `build_model`,
    imported lazily so tasks load without it), its layers running the paths `options` choose."""
    if data.model_fn is not None:
        return apply_options(data.model_fn(spec), options)
    from workers.engine.models import build_model as build

    return apply_options(build(spec, data.info, data.input_dim, data.n_outputs), options)


def make_optimizer(spec: RunSpec, model: nn.Module) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum; weight_decay is L2 added to the gradient (both optimizers)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if spec.lr is None:
        raise ValueError("make_optimizer needs a resolved spec (its learning rate filled in)")
    if spec.optimizer == "adam":
        return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay)
    return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)


def make_prober(
    spec: RunSpec, model: nn.Module, data: TaskData, optimizer
) -> tuple[Prober | None, str | None]:
    """(prober, None), or (None, why not) when the probes decline this model."""
    if not spec.probes.enabled:
        return None, None
    from workers.probes import make_prober as make  # only when asked: the probes cost imports

    prober = make(spec, model, data, optimizer)
    return prober, (None if prober is not None else "the probes declined this model; training without them.")
