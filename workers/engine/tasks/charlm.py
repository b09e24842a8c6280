"""Character-level language modelling on the Python standard library's own sources (bits per character).

The corpus is a fixed, deterministic subset of the stdlib's top-level ``.py`` files (sorted by name,
taken until CORPUS_BYTES), read once per process. Files, not characters, are split into
train/val/test from the seed, so the validation text is code the model never saw.
"""

from __future__ import annotations

import string
import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import TaskData, TaskUnavailable, seeded

CORPUS_BYTES = 2_000_000
VAL_FRACTION = TEST_FRACTION = 0.05
EVAL_CHARS = 16_384  # characters scored per val/test evaluation (split into windows of eval_seq_len)
VOCAB = string.printable  # 100 characters; every other byte maps to UNKNOWN
UNKNOWN = len(VOCAB)
VOCAB_SIZE = len(VOCAB) + 1

_LOOKUP = np.full(256, UNKNOWN, dtype=np.int64)
for _i, _ch in enumerate(VOCAB):
    _LOOKUP[ord(_ch)] = _i


def encode(raw: bytes) -> np.ndarray:
    """Character ids of raw bytes (printable ASCII keeps its id; anything else is UNKNOWN)."""
    return _LOOKUP[np.frombuffer(raw, dtype=np.uint8)]


def decode(ids) -> str:
    return "".join(VOCAB[i] if i < UNKNOWN else "\ufffd" for i in ids)


def stdlib_files(limit: int = CORPUS_BYTES) -> list[Path]:
    """The corpus: the stdlib's top-level .py files in name order, until `limit` bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chosen, total = [], 0
    for path in sorted(root.glob("*.py")):
        size = path.stat().st_size
        if total + size > limit:
            continue
        chosen.append(path)
        total += size
    if total < 100_000:
        raise TaskUnavailable(
            f"charlm needs the Python standard library's sources, but {root} holds only "
            f"{total} bytes of .py files; choose another task."
        )
    return chosen


@lru_cache(maxsize=1)
def _corpus(limit: int = CORPUS_BYTES) -> tuple[tuple[str, ...], tuple[np.ndarray, ...]]:
    files = stdlib_files(limit)
    return tuple(p.name for p in files), tuple(encode(p.read_bytes()) for p in files)


def _split_files(seed: int, limit: int = CORPUS_BYTES) -> dict[str, np.ndarray]:
    """Concatenated ids of the train / val / test files, the files shuffled by the seed."""
    names, texts = _corpus(limit)
    total = sum(len(t) for t in texts)
    order = torch.randperm(len(texts), generator=seeded(seed, 1)).tolist()
    parts: dict[str, list[np.ndarray]] = {"val": [], "test": [], "train": []}
    filled = {"val": 0, "test": 0}
    for i in order:
        target = next(
            (k for k, frac in (("val", VAL_FRACTION), ("test", TEST_FRACTION)) if filled[k] < frac * total),
            "train",
        )
        parts[target].append(texts[i])
        if target != "train":
            filled[target] += len(texts[i])
    return {k: np.concatenate(v) for k, v in parts.items()}


def _windows(ids: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping windows of length+1 characters: x one-hot (N, length, V), y (N, length)."""
    if len(ids) - 1 < length:
        raise ValueError(
            f"charlm: the evaluation text has {len(ids)} characters, fewer than eval_seq_len "
            f"{length}; lower eval_seq_len."
        )
    n = max(1, min(EVAL_CHARS // length, (len(ids) - 1) // length))
    chunks = torch.stack([ids[i * length : i * length + length + 1] for i in range(n)])
    return F.one_hot(chunks[:, :-1], VOCAB_SIZE).float(), chunks[:, 1:]


def load_charlm(spec: RunSpec, settings: Settings) -> TaskData:
    """charlm: x (B, T, 101) one-hot characters, y (B, T) the next character at every step."""
    text = {k: torch.from_numpy(v) for k, v in _split_files(spec.seed).items()}
    train, seq_len, eval_seq_len = text["train"], spec.seq_len, spec.eval_seq_len
    if seq_len is None or eval_seq_len is None:
        raise ValueError("charlm needs a resolved spec (its sequence lengths filled in)")

    def sample(batch_size: int, gen: torch.Generator):
        starts = torch.randint(0, len(train) - seq_len - 1, (batch_size,), generator=gen)
        chunks = train[starts[:, None] + torch.arange(seq_len + 1)]
        return F.one_hot(chunks[:, :-1], VOCAB_SIZE).float(), chunks[:, 1:]

    return TaskData(
        info=TASKS["charlm"],
        input_dim=VOCAB_SIZE,
        n_outputs=VOCAB_SIZE,
        splits={
            "val": _windows(text["val"], eval_seq_len),
            "test": _windows(text["test"], eval_seq_len),
        },
        sample=sample,
        seq_len=seq_len,
        eval_seq_len=spec.eval_seq_len,
        notes=[
            f"charlm: {len(_corpus()[0])} stdlib files, {len(train)} train / {len(text['val'])} val / "
            f"{len(text['test'])} test characters; vocabulary {VOCAB_SIZE} (printable ASCII + unknown)."
        ],
    )
