"""Each theory line against what it describes, simulated independently in float64 with numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from normlab import theory
from normlab.theory import angular_equilibrium, departs, effective_lr, norm_growth, stability_threshold


def tangent_gradient(rng: np.random.Generator, w: np.ndarray, size: float) -> np.ndarray:
    """A scale-invariant loss's gradient: orthogonal to w, and of norm size/‖w‖ (it scales as 1/‖w‖)."""
    g = rng.standard_normal(w.shape)
    g -= (g @ w) / (w @ w) * w
    return g / np.linalg.norm(g) * size / np.linalg.norm(w)


def test_gradient_descent_on_a_quadratic_diverges_exactly_past_two_over_eta():
    lr = 0.1
    edge = stability_threshold(lr)
    assert edge == pytest.approx(20.0)
    for curvature, stable in ((0.99 * edge, True), (1.01 * edge, False)):
        x = 1.0
        for _ in range(2000):
            x -= lr * curvature * x  # GD on ½·λ·x²
        assert (abs(x) < 1.0) == stable
    with pytest.raises(ValueError):
        stability_threshold(0.0)


def test_sgd_on_a_scale_invariant_weight_set_grows_its_norm_by_the_law():
    rng = np.random.default_rng(0)
    lr, w = 0.5, rng.standard_normal(32)
    norms_sq, grads = [float(w @ w)], []
    for _ in range(200):
        g = tangent_gradient(rng, w, size=rng.uniform(0.5, 2.0))
        grads.append(float(np.linalg.norm(g)))
        w = w - lr * g
        norms_sq.append(float(w @ w))
    assert norm_growth(norms_sq[0], lr, grads) == pytest.approx(norms_sq, rel=1e-12)
    assert all(b > a for a, b in zip(norms_sq, norms_sq[1:], strict=False))  # only grows
    assert effective_lr(lr, math.sqrt(norms_sq[-1])) < effective_lr(lr, math.sqrt(norms_sq[0]))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_weight_decay_brings_the_angular_update_to_its_equilibrium(momentum):
    rng = np.random.default_rng(1)
    lr, wd = 0.1, 0.01
    w = rng.standard_normal(64) * 5.0
    v = np.zeros_like(w)
    angles = []
    for _ in range(20000):
        g = tangent_gradient(rng, w, size=1.0) + wd * w  # SGD's weight decay: λw added to the gradient
        v = momentum * v + g
        new = w - lr * v
        cos = (new @ w) / (np.linalg.norm(new) * np.linalg.norm(w))
        angles.append(math.acos(min(1.0, cos)))
        w = new
    settled = float(np.mean(angles[-2000:]))
    assert settled == pytest.approx(angular_equilibrium(lr, wd, momentum), rel=0.05)
    assert angles[0] < 0.5 * settled  # it started far from the line (a large ‖w‖ takes small angles)


def test_departures_are_flagged_beyond_the_tolerance():
    assert departs([1.0, 1.2, None, 0.5], [1.0, 1.0, 1.0, None], rel=0.1) == [False, True, False, False]


def test_growth_step_and_its_departure_against_a_float64_sgd_step_on_a_scale_invariant_loss():
    # ℓ(w) = cᵀ(w/‖w‖): one plain SGD step, computed here, reaches the law's ‖w_{t+1}‖
    rng = np.random.default_rng(3)
    w, c, lr = rng.normal(size=(8, 8)), rng.normal(size=(8, 8)), 0.3
    n = np.linalg.norm(w)
    g = (c - w * (w * c).sum() / n**2) / n
    after = float(np.linalg.norm(w - lr * g))
    assert theory.growth_step(n, float(np.linalg.norm(g)), lr) == pytest.approx(after, rel=1e-13)
    assert not theory.growth_departs(n, after, float(np.linalg.norm(g)), lr)
    grown = math.sqrt(n**2 + 1.2 * (after**2 - n**2))  # 20 % more growth than the law's
    assert theory.growth_departs(n, grown, float(np.linalg.norm(g)), lr)
    assert not theory.growth_departs(n, grown, float(np.linalg.norm(g)), lr, rel=0.25)


def test_curvature_departs_relative_to_the_trace():
    assert not theory.curvature_departs(1e-4, 1.0) and theory.curvature_departs(-2e-3, 1.0)
