"""Live interventions at the edge: how often (a per-user rate,
429 with Retry-After) and how many a run takes (the spec's cap, 422), so that no flood of requests can
make a run's stored spec unreadable."""

from __future__ import annotations

import math
from typing import Any

from fastapi import HTTPException

from backend.limits import ANONYMOUS, RateLimiter, too_many
from normlab.settings import Settings
from normlab.store import RunRow, Store, lineage

_limiters: dict[str, RateLimiter] = {}


def _rate(store: Store, settings: Settings, user: str | None) -> None:
    key = user if user is not None and settings.auth != "off" else ANONYMOUS
    per_minute = settings.intervention_rate_per_minute
    wait = _limiters.setdefault(store.url, RateLimiter()).hit(key, per_minute)
    if wait > 0:
        who = "per user" if key != ANONYMOUS else "from anonymous users together"
        raise too_many(
            f"Too many interventions: this server takes {per_minute} per minute {who}. Retry in "
            f"{math.ceil(wait)} s (NORMLAB_INTERVENTION_RATE_PER_MINUTE sets the limit).",
            wait,
            "rate",
        )


def ask(store: Store, settings: Settings, user: str | None, run: RunRow, changes: dict[str, Any]) -> None:
    """Leave `changes` for the running run's worker, or answer 429 / 422 saying why not."""
    _rate(store, settings, user)
    try:
        lineage.ask_intervention(store, run["id"], changes)
    except lineage.TooManyInterventions as exc:
        raise HTTPException(422, {"detail": str(exc), "fields": {"interventions": str(exc)}}) from None
