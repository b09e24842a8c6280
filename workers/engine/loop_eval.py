"""Evaluation for the training loop: a split's metrics in memory-bounded chunks, and recurrent BN's
report of what it did beyond the trained sequence length."""

from __future__ import annotations

import torch
from torch import nn

from workers.engine.tasks import TaskData

# Floats one evaluation chunk may hold (inputs, outputs and the hidden states a recurrent net keeps for
# every step): 128 MB, so evaluating 512 adding sequences of 2000 steps does not take gigabytes.
CHUNK_FLOATS = 1 << 25


def chunk_size(data: TaskData, x: torch.Tensor, hidden_units: int) -> int:
    """Cases per evaluation forward pass, so that one pass stays within CHUNK_FLOATS."""
    steps = x.shape[1] if data.info.kind == "sequence" else 1
    per_case = x[0].numel() + steps * (data.n_outputs + 4 * hidden_units)  # 4: states + transients
    return max(1, min(len(x), CHUNK_FLOATS // max(1, per_case)))


@torch.no_grad()
def evaluate(
    model: nn.Module, data: TaskData, split: str, device: torch.device, hidden_units: int = 0
) -> dict[str, float]:
    """{"loss": …, "accuracy" | "bpc" | "mse": …} of the model on a whole split (eval mode, no grad).
    `hidden_units` (hidden size × layers) sizes the chunks the split is evaluated in."""
    x, y = data.split(split)
    was_training = model.training
    model.eval()
    try:
        chunk = chunk_size(data, x, hidden_units)
        outputs = [model(x[i : i + chunk].to(device)).float().cpu() for i in range(0, len(x), chunk)]
        return data.metrics(torch.cat(outputs), y)
    finally:
        model.train(was_training)


def beyond_trained_length(model: nn.Module) -> list[dict]:
    """Reports of recurrent BatchNorm layers whose latest evaluation ran past their trained length:
    [{"policy", "trained_steps", "eval_steps_beyond", …}] (empty when none did)."""
    whole_model = getattr(model, "batchnorm_report", None)  # the models' own summary over all layers
    if callable(whole_model):
        r = whole_model()
        return [{"layer": "all recurrent BatchNorm layers", **r}] if r and r.get("eval_steps_beyond") else []
    reports = []
    for name, module in model.named_modules():
        report = getattr(module, "beyond_report", None)
        if callable(report):
            r = report()
            if r.get("eval_steps_beyond"):
                reports.append({"layer": name, **r})
    return reports
