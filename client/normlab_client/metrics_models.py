"""Public shape of `GET /api/runs/{id}/scalars`: every logged step of a run, in pages (never sampled).

Kept apart from `normlab_client.api_models` only so this change merges cleanly; the shape is the API's.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

# A non-finite value (a diverged loss) travels as one of these strings: JSON has no NaN or infinity.
NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class ScalarsPage(BaseModel):
    """Consecutive `scalars` events of a run, column by column, exactly as stored."""

    run_id: str
    seq: list[int]  # the events' sequence numbers (increasing; other kinds' numbers are skipped)
    step: list[int]
    time: list[float]  # wall-clock seconds since the epoch
    values: dict[str, list[float | str | None]] = Field(
        description="One column per metric name; null where the step has no value (e.g. no evaluation), "
        "'nan', 'inf' or '-inf' where the value was not finite."
    )
    next_after: int | None = Field(
        description="Pass as ?after= for the next page; null when this page holds the newest stored event."
    )
    last_seq: int  # the run's newest stored event when this page was read
