"""Fresh seeds for a replication, drawn at run time from a range no rule, margin or tuning ever saw, and
the replication record: per claim, its verdict on the declared seeds beside the latest fresh draw and how
many fresh draws held.

The declared verdict seeds are 0–4 (normlab.presets.SEEDS) and the tuning seeds 100–104
(normlab.tuning.TUNING_SEEDS); every claim, margin and grid was written with at most those in view. A
fresh draw comes from the operating system's randomness (`secrets`), never from a seeded generator, so
no one can have chosen it, and the caller records the seeds it got: a replication is then reproducible
from its output like any other run.
"""

from __future__ import annotations

import secrets

from pydantic import BaseModel

from normlab_client.group_models import GroupPublic

FRESH_MIN = 10_000  # every seed any rule was written with lies below this
FRESH_MAX = 2**31 - 1  # RunSpec.seed's upper bound
MAX_FRESH = 8  # a group holds at most 8 seeds (normlab_client.api_models)


def draw_fresh_seeds(k: int) -> list[int]:
    """`k` distinct seeds in [FRESH_MIN, FRESH_MAX], drawn from the OS's randomness (sorted)."""
    if not 1 <= k <= MAX_FRESH:
        raise ValueError(f"draw between 1 and {MAX_FRESH} fresh seeds (got {k})")
    rng = secrets.SystemRandom()
    return sorted(rng.sample(range(FRESH_MIN, FRESH_MAX + 1), k))


def is_fresh(seed: int) -> bool:
    """Whether `seed` lies in the range only fresh draws use."""
    return FRESH_MIN <= seed <= FRESH_MAX


class DrawVerdict(BaseModel):
    """One launch's verdict on one claim: its group, seeds, and holds (None while seeds are to come)."""

    group_id: str
    seeds: list[int]
    holds: bool | None
    difference: float | None = None
    interval: list[float] | None = None


class ClaimReplication(BaseModel):
    """One claim's record: its verdict on the declared seeds (the latest such launch), on the latest fresh
    draw, and how many fresh draws were judged and held."""

    claim: str
    exploratory: bool
    declared_seeds: DrawVerdict | None
    latest: DrawVerdict | None
    draws: int  # fresh draws launched
    judged: int  # of them, with every planned seed in
    held: int  # of those, where the claim held


class Replications(BaseModel):
    """A preset's replication record (`GET /api/presets/{name}/replications`)."""

    preset: str
    declared_seeds: list[int]
    claims: list[ClaimReplication]


def _verdict(group: GroupPublic, seeds: list[int], index: int) -> DrawVerdict:
    claim = (group.claims or [])[index]
    return DrawVerdict(
        group_id=group.group_id,
        seeds=seeds,
        holds=claim.holds,
        difference=claim.difference,
        interval=claim.interval,
    )


def record(
    name: str, declared: list[int], launches: list[tuple[GroupPublic, list[int], bool]]
) -> Replications:
    """The record from a preset's launches, oldest first: (group summary, its seeds, whether fresh). A
    launch on exactly the declared seeds gives the declared verdict; fresh draws the replication."""
    on_declared = [(g, s) for g, s, fresh in launches if not fresh and sorted(s) == sorted(declared)]
    draws = [(g, s) for g, s, fresh in launches if fresh]
    base = on_declared[-1][0] if on_declared else (draws[-1][0] if draws else None)
    out = []
    for i, claim in enumerate((base.claims or []) if base else []):
        judged = [g for g, _ in draws if len(g.claims or []) > i and not (g.claims or [])[i].pending]
        out.append(
            ClaimReplication(
                claim=claim.claim,
                exploratory=claim.exploratory,
                declared_seeds=_verdict(*on_declared[-1], i) if on_declared else None,
                latest=_verdict(*draws[-1], i) if draws else None,
                draws=len(draws),
                judged=len(judged),
                held=sum((g.claims or [])[i].holds is True for g in judged),
            )
        )
    return Replications(preset=name, declared_seeds=declared, claims=out)
