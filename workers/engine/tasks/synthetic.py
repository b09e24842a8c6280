"""Generated sequence tasks for long-range dynamics (§3.1): the adding problem and copy memory.

Training batches are fresh samples from the run's generator; val and test are fixed sets drawn from the
seed at eval_seq_len, which may be longer than the training seq_len.
"""

from __future__ import annotations

import torch

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import IGNORE, TaskData, seeded

VAL_CASES, TEST_CASES = 256, 512
COPY_LENGTH = 10  # symbols to remember
COPY_SYMBOLS = 8  # data symbols 1..8; 0 = blank, 9 = "recall now" delimiter
COPY_VOCAB = COPY_SYMBOLS + 2


def adding_batch(n: int, seq_len: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The adding problem (Hochreiter & Schmidhuber 1997): x (n, T, 2) = (value ~ U[0, 1], marker);
    one marker in each half of the sequence; y (n,) = the sum of the two marked values.
    Predicting the mean (1.0) scores mse 1/6; solving it scores ≈ 0."""
    values = torch.rand(n, seq_len, generator=generator)
    half = max(1, seq_len // 2)
    first = torch.randint(0, half, (n,), generator=generator)
    second = torch.randint(half, seq_len, (n,), generator=generator) if seq_len > 1 else first
    markers = torch.zeros(n, seq_len)
    rows = torch.arange(n)
    markers[rows, first] = 1.0
    markers[rows, second] = 1.0
    y = values[rows, first] + values[rows, second] * (second != first)
    return torch.stack([values, markers], dim=-1), y


def copy_batch(n: int, delay: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy memory (Arjovsky et al. 2016): 10 data symbols, delay-1 blanks, the delimiter, 10 blanks;
    total length delay + 20, one-hot (n, delay + 20, 10). Targets are the 10 symbols at the last 10
    steps and IGNORE elsewhere, so loss and accuracy count the recall positions only.
    Guessing scores ln 8 ≈ 2.08 nats and accuracy 1/8."""
    total = delay + 2 * COPY_LENGTH
    symbols = torch.randint(1, COPY_SYMBOLS + 1, (n, COPY_LENGTH), generator=generator)
    ids = torch.zeros(n, total, dtype=torch.long)
    ids[:, :COPY_LENGTH] = symbols
    ids[:, COPY_LENGTH + delay - 1] = COPY_VOCAB - 1
    y = torch.full((n, total), IGNORE, dtype=torch.long)
    y[:, -COPY_LENGTH:] = symbols
    return torch.nn.functional.one_hot(ids, COPY_VOCAB).float(), y


def _generated(
    spec: RunSpec, make, input_dim: int, n_outputs: int, note: str, extra_steps: int = 0
) -> TaskData:
    seq_len, eval_seq_len = spec.seq_len, spec.eval_seq_len
    if seq_len is None or eval_seq_len is None:
        raise ValueError(f"task {spec.task}: give a resolved spec (its sequence lengths filled in)")
    return TaskData(
        info=TASKS[spec.task],
        input_dim=input_dim,
        n_outputs=n_outputs,
        splits={
            "val": make(VAL_CASES, eval_seq_len, seeded(spec.seed, 2)),
            "test": make(TEST_CASES, eval_seq_len, seeded(spec.seed, 3)),
        },
        sample=lambda batch_size, gen: make(batch_size, seq_len, gen),
        seq_len=seq_len + extra_steps,
        eval_seq_len=eval_seq_len + extra_steps,
        notes=[
            f"{spec.task}: {note}; fresh training sequences at seq_len {seq_len}; {VAL_CASES} val / "
            f"{TEST_CASES} test sequences at eval_seq_len {eval_seq_len} (seed {spec.seed})."
        ],
    )


def load_adding(spec: RunSpec, settings: Settings) -> TaskData:
    """adding: x (B, T, 2), y (B,) floats; the model's last step is the prediction."""
    return _generated(spec, adding_batch, 2, 1, "sum the two marked values (mse; predicting 1.0 scores 1/6)")


def load_copy(spec: RunSpec, settings: Settings) -> TaskData:
    """copy: x (B, seq_len + 20, 10) one-hot, y (B, seq_len + 20) with IGNORE off the recall steps."""
    return _generated(
        spec,
        copy_batch,
        COPY_VOCAB,
        COPY_VOCAB,
        f"recall {COPY_LENGTH} symbols after a delay of seq_len steps (length seq_len + 20)",
        extra_steps=2 * COPY_LENGTH,
    )
