"""The dashboard's look, shared with `normlab_client`'s plots: one colour per normalizer, the smoothing.

One colour per normalizer everywhere (Okabe–Ito, colour-blind safe). One definition of the smoothing:
TensorBoard's debiased exponential moving average (`normlab.emaStep` in the browser continues it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies.
NORM_COLORS = {
    "layer": "#0072B2",  # blue
    "batch": "#D55E00",  # vermillion
    "weight": "#009E73",  # bluish green
    "rms": "#CC79A7",  # reddish purple
    "group": "#56B4E9",  # sky blue (GroupNorm with one group is LayerNorm; orange sat too near batch's)
    "none": "#000000",  # black: the baseline
}
OTHER_COLOR = "#7F7F7F"
RAW_OPACITY = 0.28  # the raw series under a smoothed curve: visible, but clearly behind it


def norm_color(norm: str) -> str:
    return NORM_COLORS.get(norm, OTHER_COLOR)


def ema(
    values: Iterable[float | None], weight: float, state: tuple[float, int] = (0.0, 0)
) -> tuple[list[float | None], tuple[float, int]]:
    """Debiased exponential moving average (TensorBoard's): (smoothed list, (accumulator, n)).

    acc_k = w·acc_{k-1} + (1 − w)·v_k over the finite values (acc_0 = 0, w = weight), and the k-th output
    is acc_k / (1 − w^k); missing and non-finite values pass through and do not count. Passing the
    returned state back continues the average exactly where it stopped (how the browser extends a
    smoothed history with live points).
    """
    acc, n = state
    out: list[float | None] = []
    for v in values:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            out.append(v)
            continue
        acc = acc * weight + (1.0 - weight) * v
        n += 1
        debias = 1.0 - weight**n
        out.append(acc / debias if debias > 0 else v)
    return out, (acc, n)
