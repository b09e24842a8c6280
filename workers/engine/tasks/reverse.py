"""Sequence reversal for the tiny Transformer (`workers.engine.transformer`): read T random symbols, write
them in reverse order. Every output position is scored (per-step classes); guessing scores ln V nats and
accuracy 1/V. The inputs are token ids (B, T); the model is the task's own (pre- or post-LN by the spec's
``ln_position``)."""

from __future__ import annotations

import torch

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import TaskData, seeded
from workers.engine.transformer import Transformer

SYMBOLS = 10  # V
LENGTH = 16  # T
HEADS = 4
VAL_CASES = TEST_CASES = 512


def reverse_batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """x (n, T) uniform symbol ids; y (n, T) = x read backwards (y[:, t] = x[:, T − 1 − t])."""
    x = torch.randint(0, SYMBOLS, (n, LENGTH), generator=generator)
    return x, x.flip(1)


def load_reverse(spec: RunSpec, settings: Settings) -> TaskData:
    info = TASKS["reverse"]
    d = spec.hidden_size or info.hidden_size
    layers = spec.layers or info.layers
    return TaskData(
        info=info,
        input_dim=LENGTH,
        n_outputs=SYMBOLS,
        splits={
            "val": reverse_batch(VAL_CASES, seeded(spec.seed, 2)),
            "test": reverse_batch(TEST_CASES, seeded(spec.seed, 3)),
        },
        sample=reverse_batch,
        model_fn=lambda s: Transformer(
            SYMBOLS,
            LENGTH,
            s.hidden_size or info.hidden_size,
            s.layers or info.layers,
            HEADS,
            s.norm,
            s.ln_position,
            s.gain_init,
        ),
        notes=[
            f"reverse: {LENGTH} symbols of {SYMBOLS} in, the same reversed out; fresh training sequences, "
            f"{VAL_CASES} val / {TEST_CASES} test (seed {spec.seed}); Transformer encoder, d = {d}, "
            f"{layers} blocks, {HEADS} heads, {spec.ln_position}-LN, no warm-up."
        ],
    )
