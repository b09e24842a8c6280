"""The probes' likelihood scores exactly the predictions the task's own loss scores."""

from __future__ import annotations

import pytest
import torch

from normlab_client.spec import RunSpec
from workers.engine.tasks import load_task
from workers.probes.likelihood import Likelihood


@pytest.mark.parametrize(
    ("task", "extra"), [("digits", {}), ("copy", {"seq_len": 5}), ("adding", {"seq_len": 7})]
)
def test_mean_nll_matches_the_task_loss(task, extra, settings):
    data = load_task(RunSpec(task=task, **extra), settings)
    x, y = next(data.train_batches(6, torch.Generator().manual_seed(0)))
    shape = (6, x.shape[1], data.n_outputs) if x.dim() == 3 else (6, data.n_outputs)
    outputs = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    lik = Likelihood(data.info.target)
    pred, tgt, case = lik.select(outputs, y)
    want = float(data.loss(outputs, y))
    assert float(lik.mean_nll(pred, tgt)) * lik.task_loss_ratio() == pytest.approx(want, rel=1e-6)
    assert case.max() < 6 and len(case) == len(pred)
    if task == "copy":  # only the recall steps are scored
        assert len(pred) == 6 * 10


@pytest.mark.parametrize("target", ["class", "regression"])
def test_sampled_residual_has_covariance_lambda(target):
    lik = Likelihood(target)
    pred = torch.randn(1, 4 if target == "class" else 1, dtype=torch.float64).repeat(40000, 1)
    r = lik.sampled_residual(pred, torch.Generator().manual_seed(0))
    cov = r.T @ r / len(r)
    eye = torch.eye(pred.shape[1], dtype=torch.float64)
    lam = torch.stack([lik.lam(pred[:1], e[None])[0] for e in eye])
    torch.testing.assert_close(cov, lam, atol=0.01, rtol=0.05)
