"""Depth at initialisation: the effective rank's definition, and rank collapse over 50 ReLU layers
without normalization and with LayerNorm, but not with BatchNorm, on every seed 0–4 (float64)."""

from __future__ import annotations

import math

import pytest
import torch

from workers.probes.depth_init import depth_profile, effective_rank


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: more threads only contend on a shared machine
    yield
    torch.set_num_threads(before)


def test_effective_rank_counts_equal_singular_values():
    q, _ = torch.linalg.qr(torch.randn(40, 40, dtype=torch.float64))
    for k in (1, 3, 17):
        h = q[:, :k] @ torch.diag(torch.full((k,), 2.5, dtype=torch.float64)) @ q[:k, :]
        assert effective_rank(h) == pytest.approx(k, rel=1e-9)
    two = torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64))  # p = (¾, ¼)
    assert effective_rank(two) == pytest.approx(math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))))


@pytest.mark.parametrize("seed", range(5))
def test_rank_collapses_with_depth_unless_batchnorm_keeps_the_cases_apart(seed):
    prof = {n: depth_profile(n, depth=50, width=128, batch=64, seed=seed) for n in ("none", "batch", "layer")}
    for n in ("none", "layer"):
        ranks = prof[n]["effective_rank"]
        assert ranks[-1] < 0.2 * ranks[0], n
    bn = prof["batch"]["effective_rank"]
    assert bn[-1] > 0.75 * bn[0]
    # BN at initialisation: the gradient grows towards the input (Yang et al. 2019)
    grads = prof["batch"]["grad_norm"]
    assert grads[0] > 100 * grads[-1] and all(math.isfinite(g) for g in grads)


def test_an_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="choose one of"):
        depth_profile("weight", depth=2)


def test_the_command_prints_each_normalizers_profile_and_refuses_bad_sizes(capsys):
    import json

    from normlab.cli import main

    assert main(["depth-init", "--depth", "4", "--seeds", "0,1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seeds"] == [0, 1] and set(out["profiles"]) == {"none", "batch", "layer"}
    assert all(len(p["effective_rank"]) == 4 for runs in out["profiles"].values() for p in runs)
    assert main(["depth-init", "--batch", "1"]) == 2
    assert "BatchNorm needs ≥ 2 cases" in capsys.readouterr().err
