"""`Group`: a sweep's or preset's runs together — wait for them, their arms and the paper's claims."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from normlab_client.api_models import RunList
from normlab_client.events import TERMINAL_STATUSES
from normlab_client.group_models import Claim, GroupPublic
from normlab_client.http import Http
from normlab_client.progress import Progress
from normlab_client.run import STORED, Run, require_pandas

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go


class Group:
    def __init__(self, client: Http, group_id: str, run_ids: list[str]):
        self.client = client
        self.id = group_id
        self.run_ids = list(run_ids)
        self._public: GroupPublic | None = None

    def __repr__(self) -> str:
        return f"Group({self.id!r}, runs={len(self.run_ids)})"

    def refresh(self, metric: str | None = None) -> GroupPublic:
        """The group as the server summarizes it now (arms over the finished seeds, claims)."""
        params = {"metric": metric} if metric else None
        self._public = GroupPublic.model_validate(
            self.client.request("GET", f"/api/groups/{self.id}", params=params).json()
        )
        self.run_ids = [r.id for r in self._public.runs]
        return self._public

    @property
    def runs(self) -> list[Run]:
        return [Run(self.client, r) for r in self.run_ids]

    def statuses(self) -> dict[str, str]:
        """{run id: status} read now (one light request, not the group's summary)."""
        page = RunList.model_validate(
            self.client.request("GET", "/api/runs", params={"group": self.id, "limit": 500}).json(),
            context=STORED,
        )
        return {r.id: r.status.value for r in page.items}

    def wait(self, progress: bool = True, timeout: float | None = None, poll_s: float = 0.5) -> Group:
        """Block until every run of the group has ended (a progress bar of runs ended); returns the group."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = Progress(f"group {self.id}", len(self.run_ids)) if progress else None
        while True:
            statuses = self.statuses()
            ended = sum(s in TERMINAL_STATUSES for s in statuses.values())
            if bar is not None:
                bar.update(ended, "runs ended", force=True)
            if statuses and ended == len(statuses):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"group {self.id}: {ended}/{len(statuses)} runs ended after {timeout} s")
            time.sleep(poll_s)
        if bar is not None:
            bar.close(f"{ended}/{len(statuses)} runs ended")
        self.refresh()
        return self

    @property
    def public(self) -> GroupPublic:
        return self._public if self._public is not None else self.refresh()

    @property
    def arms(self) -> pd.DataFrame:
        """One row per arm: label, n finished seeds, mean ± std of the group's metric, the seeds' values."""
        pd = require_pandas()
        g = self.refresh()
        rows: list[dict[str, Any]] = [
            {
                "arm": c.label,
                "n": c.n,
                "mean": c.mean,
                "std": c.std,
                "metric": g.metric,
                "seeds": c.seeds,
                "values": c.values,
                "auc": c.curve.auc,
            }
            for c in g.arms
        ]
        return pd.DataFrame(rows, columns=["arm", "n", "mean", "std", "metric", "seeds", "values", "auc"])

    @property
    def claims(self) -> list[Claim]:
        """The preset's claims judged over its finished seeds (effect, standard error, rule); [] if none."""
        return list(self.refresh().claims or [])

    def finals(self) -> pd.DataFrame:
        """One row per run: id, arm, seed, status and every final metric."""
        pd = require_pandas()
        g = self.refresh()
        return pd.DataFrame(
            [
                {"run_id": r.id, "arm": r.arm, "seed": r.seed, "status": r.status.value, **r.metrics}
                for r in g.runs
            ]
        )

    def plot(self, smoothing: float = 0.6, live: bool | None = None) -> go.Figure:
        """Every run's curves (coloured by normalizer), live in Jupyter, static elsewhere."""
        from normlab_client.plot import plot_runs

        return plot_runs(self.runs, smoothing=smoothing, live=live)
