"""handwriting: generated pen trajectories and a mixture-density output (§6.5 after Graves 2013, scaled).

No handwriting corpus ships in a package, so lines are written from a fixed alphabet of GLYPHS smooth
glyphs (each a few random Fourier terms, drawn once from a fixed seed: the same "letters" on every
machine), chained with pen-up jumps, each line by its own "writer" (slant, size, speed) plus jitter.
A step's input is Graves' (Δx_t, Δy_t, end-of-stroke_t); the target is the next step's triple, scored by
a mixture of MIXTURES bivariate Gaussians for (Δx, Δy) and a Bernoulli for the pen (eq. 23–26 of Graves
2013). Unconditional: no character window (the paper's model is conditioned on the text).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import TaskData, seeded

GLYPHS, POINTS, TERMS = 12, 20, 3  # alphabet size, pen points per glyph, Fourier terms per coordinate
MIXTURES = 20  # Graves 2013 §4: 20 bivariate Gaussian components
N_OUTPUTS = 1 + 6 * MIXTURES  # end-of-stroke logit; per component: weight, 2 means, 2 log-σ, correlation
VAL_CASES, TEST_CASES = 128, 128
JITTER = 0.02


@lru_cache(maxsize=1)
def glyph_offsets() -> np.ndarray:
    """(GLYPHS, POINTS, 2) pen offsets of each glyph of the fixed alphabet (a loop-and-stroke curve)."""
    rng = np.random.default_rng(20160721)  # the alphabet is part of the task, not of a run's seed
    s = np.linspace(0.0, 1.0, POINTS + 1)[:, None]
    k = np.arange(1, TERMS + 1)[None, :]
    glyphs = []
    for _ in range(GLYPHS):
        a, b = rng.normal(0, 0.6, (2, TERMS)) / k
        pa, pb = rng.uniform(0, 2 * math.pi, (2, TERMS))
        x = 1.0 * s[:, 0] + (a * np.sin(2 * math.pi * k * s + pa)).sum(1)
        y = (b * np.sin(2 * math.pi * k * s + pb)).sum(1) * 1.5
        glyphs.append(np.stack([np.diff(x), np.diff(y)], axis=1))
    return np.stack(glyphs).astype(np.float32)


def write_lines(n: int, seq_len: int, rng: np.random.Generator) -> np.ndarray:
    """(n, seq_len + 1, 3) strokes (Δx, Δy, end-of-stroke), each line by its own writer."""
    glyphs = glyph_offsets()
    per_line = math.ceil((seq_len + 1) / POINTS) + 1
    out = np.zeros((n, per_line * POINTS, 3), dtype=np.float32)
    for i in range(n):
        slant, size = rng.uniform(-0.4, 0.4), rng.uniform(0.7, 1.3)
        shear = np.array([[1.0, slant], [0.0, 1.0]], dtype=np.float32) * size
        order = rng.integers(0, GLYPHS, per_line)
        pts = glyphs[order].reshape(-1, 2) @ shear.T
        pts += rng.normal(0, JITTER, pts.shape)
        out[i, :, :2] = pts
        out[i, POINTS - 1 :: POINTS, 2] = 1.0  # the pen lifts after each glyph…
        out[i, POINTS::POINTS, 0] += rng.uniform(0.2, 0.6, per_line - 1)  # …and moves on to the next
    return out[:, : seq_len + 1] / np.array([0.35, 0.35, 1.0], dtype=np.float32)  # ≈ unit-scale offsets


def _pairs(strokes: np.ndarray) -> tuple[Tensor, Tensor]:
    t = torch.from_numpy(np.ascontiguousarray(strokes))
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


def mixture_nll(outputs: Tensor, y: Tensor) -> Tensor:
    """Mean per-step negative log-likelihood (nats) of the next (Δx, Δy, eos) under the mixture density."""
    o = outputs.float()
    eos_logit, rest = o[..., 0], o[..., 1:].reshape(*o.shape[:-1], 6, MIXTURES)
    log_pi = F.log_softmax(rest[..., 0, :], dim=-1)
    mu1, mu2, log_s1, log_s2 = rest[..., 1, :], rest[..., 2, :], rest[..., 3, :], rest[..., 4, :]
    rho = torch.tanh(rest[..., 5, :]) * (1 - 1e-4)
    dx, dy, eos = y[..., 0:1], y[..., 1:2], y[..., 2]
    z1, z2 = (dx - mu1) * torch.exp(-log_s1), (dy - mu2) * torch.exp(-log_s2)
    one_minus = 1 - rho**2
    log_n = (
        -(z1**2 + z2**2 - 2 * rho * z1 * z2) / (2 * one_minus)
        - log_s1
        - log_s2
        - 0.5 * torch.log(one_minus)
        - math.log(2 * math.pi)
    )
    pen = F.binary_cross_entropy_with_logits(eos_logit, eos, reduction="none")
    return (-torch.logsumexp(log_pi + log_n, dim=-1) + pen).mean()


def load_handwriting(spec: RunSpec, settings: Settings) -> TaskData:
    """Fresh lines per training batch (from the run's generator); fixed val/test lines from the seed."""
    seq_len = spec.seq_len or TASKS["handwriting"].seq_len or 300
    val_rng, test_rng = (np.random.default_rng(seeded(spec.seed, stream).initial_seed()) for stream in (2, 3))
    val = _pairs(write_lines(VAL_CASES, seq_len, val_rng))
    test = _pairs(write_lines(TEST_CASES, seq_len, test_rng))

    def sample(batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        return _pairs(write_lines(batch_size, seq_len, np.random.default_rng(seed)))

    return TaskData(
        info=TASKS["handwriting"],
        input_dim=3,
        n_outputs=N_OUTPUTS,
        splits={"val": val, "test": test},
        sample=sample,
        seq_len=seq_len,
        eval_seq_len=seq_len,
        loss_fn=mixture_nll,
        notes=[
            f"handwriting: generated pen lines of {seq_len} points from a {GLYPHS}-glyph alphabet; "
            f"{MIXTURES}-component mixture density output (nats per point)."
        ],
    )
