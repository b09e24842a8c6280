"""Tasks: `load_task(spec, settings) -> TaskData`, one loader per catalog task in one registry dict.

All data is local (scikit-learn's digits, generated MNIST-1D / adding / copy / reversal, the stdlib's
sources, and MNIST's IDX files when the user put them in ``<data_dir>/mnist``). Splits are fixed by the
spec's seed.
"""

from __future__ import annotations

from collections.abc import Callable

from normlab.settings import Settings
from normlab_client.spec import RunSpec
from workers.engine.tasks.base import IGNORE, TaskData, TaskUnavailable
from workers.engine.tasks.charlm import load_charlm
from workers.engine.tasks.digits import (
    load_conv_digits,
    load_digits_mse,
    load_digits_task,
    load_pixel_digits,
    load_seq_digits,
)
from workers.engine.tasks.draw import load_draw
from workers.engine.tasks.handwriting import load_handwriting
from workers.engine.tasks.mnist import load_mnist, load_mnist1d, read_idx
from workers.engine.tasks.mnist5k import load_conv_mnist5k, load_mnist5k, load_pixel_mnist5k
from workers.engine.tasks.order_embed import load_order_embed
from workers.engine.tasks.reverse import load_reverse
from workers.engine.tasks.synthetic import load_adding, load_copy

Loader = Callable[[RunSpec, Settings], TaskData]

LOADERS: dict[str, Loader] = {
    "digits": load_digits_task,
    "digits-mse": load_digits_mse,
    "mnist": load_mnist,
    "mnist5k": load_mnist5k,
    "mnist1d": load_mnist1d,
    "seq-digits": load_seq_digits,
    "pixel-digits": load_pixel_digits,
    "pixel-mnist5k": load_pixel_mnist5k,
    "handwriting": load_handwriting,
    "draw": load_draw,
    "order-embed": load_order_embed,
    "adding": load_adding,
    "copy": load_copy,
    "charlm": load_charlm,
    "conv-digits": load_conv_digits,
    "conv-mnist5k": load_conv_mnist5k,
    "reverse": load_reverse,
}


def load_task(spec: RunSpec, settings: Settings) -> TaskData:
    """The task's data for a spec (resolved here if it is not already). Raises TaskUnavailable when the
    data is not on this machine, with a message saying where to put it."""
    spec = spec.resolved()
    return LOADERS[spec.task](spec, settings)


__all__ = ["IGNORE", "LOADERS", "TaskData", "TaskUnavailable", "load_task", "read_idx"]
