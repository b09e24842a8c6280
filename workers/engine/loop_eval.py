"""Evaluation for the training loop: a split's metrics in memory-bounded chunks, and recurrent BN's
report of what it did beyond the trained sequence length."""

from __future__ import annotations

import torch
from torch import nn

from workers.engine.tasks import TaskData

CHUNK_ELEMENTS = 1 << 21  # input + output floats per evaluation chunk (bounds memory at long eval_seq_len)


@torch.no_grad()
def evaluate(model: nn.Module, data: TaskData, split: str, device: torch.device) -> dict[str, float]:
    """{"loss": …, "accuracy" | "bpc" | "mse": …} of the model on a whole split (eval mode, no grad)."""
    x, y = data.split(split)
    was_training = model.training
    model.eval()
    try:
        per_case = x[0].numel() + (y[0].numel() * data.n_outputs)
        chunk = max(1, min(len(x), CHUNK_ELEMENTS // max(1, per_case)))
        outputs = [model(x[i:i + chunk].to(device)).float().cpu() for i in range(0, len(x), chunk)]
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

