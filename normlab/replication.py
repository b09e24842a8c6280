"""Fresh seeds for a replication: drawn at run time from a range no rule, margin or tuning ever saw.

The declared verdict seeds are 0–4 (normlab.presets.SEEDS) and the tuning seeds 100–104
(normlab.tuning.TUNING_SEEDS); every claim, margin and grid was written with at most those in view. A
fresh draw comes from the operating system's randomness (`secrets`), never from a seeded generator, so
no one can have chosen it, and the caller records the seeds it got: a replication is then reproducible
from its output like any other run.
"""

from __future__ import annotations

import secrets

FRESH_MIN = 10_000  # every seed any rule was written with lies below this
FRESH_MAX = 2**31 - 1  # RunSpec.seed's upper bound
MAX_FRESH = 8  # a group holds at most 8 seeds (normlab.api_models)


def draw_fresh_seeds(k: int) -> list[int]:
    """`k` distinct seeds in [FRESH_MIN, FRESH_MAX], drawn from the OS's randomness (sorted)."""
    if not 1 <= k <= MAX_FRESH:
        raise ValueError(f"draw between 1 and {MAX_FRESH} fresh seeds (got {k})")
    rng = secrets.SystemRandom()
    return sorted(rng.sample(range(FRESH_MIN, FRESH_MAX + 1), k))


def is_fresh(seed: int) -> bool:
    """Whether `seed` lies in the range only fresh draws use."""
    return FRESH_MIN <= seed <= FRESH_MAX
