"""`Run`: one run on the server — its status, live events, full-resolution metrics, and what to do to it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from normlab_client.api_models import RunPublic
from normlab_client.errors import NormlabError
from normlab_client.events import TERMINAL_STATUSES, Event, RunStatus, RunSummary
from normlab_client.http import Http
from normlab_client.metrics_models import NON_FINITE, ScalarsPage
from normlab_client.progress import Progress
from normlab_client.spec import RunSpec
from normlab_client.sse import run_events

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go


PAGE = 10_000  # scalars events per request of metrics()
# The server judged a run's spec when it was submitted, perhaps with normalizers registered there and
# not here (normlab_client.norms): read back, it is taken as stored.
STORED = {"stored": True}


def require_pandas() -> ModuleType:
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - the test environment has pandas
        raise ImportError("DataFrames need pandas: pip install 'normlab-client[pandas]'") from exc
    module: ModuleType = pandas
    return module


class Run:
    """A run by id. `info` is the last RunPublic read (`refresh()` reads it again)."""

    def __init__(self, client: Http, run_id: str, info: RunPublic | None = None):
        self.client = client
        self.id = run_id
        self._info = info

    def __repr__(self) -> str:
        status = self._info.status.value if self._info else "?"
        return f"Run({self.id!r}, status={status!r})"

    def refresh(self) -> RunPublic:
        self._info = RunPublic.model_validate(
            self.client.request("GET", f"/api/runs/{self.id}").json(), context=STORED
        )
        return self._info

    @property
    def info(self) -> RunPublic:
        return self._info if self._info is not None else self.refresh()

    @property
    def spec(self) -> RunSpec:
        return self.info.spec  # resolved: never changes

    @property
    def status(self) -> RunStatus:
        """The status now (read from the server)."""
        return self.refresh().status

    @property
    def summary(self) -> RunSummary:
        """The final metrics and probes ({} until the run ends; read from the server)."""
        return self.refresh().summary

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    # ---- following a run ----------------------------------------------------------------------------
    def events(self, live: bool = True, after: int = 0, timeout: float | None = None) -> Iterator[Event]:
        """Typed events after sequence number `after`. live=True: until the run's terminal status (a
        dropped connection resumes from the last event, no gap, no repeat); live=False: only those
        stored now. TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stop_at = None if live else self.refresh().last_seq
        if stop_at is not None and stop_at <= after:
            return
        for event in run_events(
            lambda headers: self.client.stream(f"/api/runs/{self.id}/events", headers),
            after,
            deadline=deadline,
        ):
            yield event
            if stop_at is not None and event.seq >= stop_at:
                return

    def wait(self, progress: bool = True, timeout: float | None = None) -> Run:
        """Block until the run ends (a progress bar on stderr unless progress=False); returns the run.
        TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = Progress(f"run {self.id}", self.spec.steps or 0) if progress else None
        try:
            left = None if deadline is None else deadline - time.monotonic()
            for event in self.events(live=True, timeout=left):
                if bar is not None and event.kind == "scalars":
                    loss = event.payload.get("train_loss")
                    bar.update(event.step, f"train_loss {loss:.4g}" if isinstance(loss, float) else "")
        finally:
            info = self.refresh()
            if bar is not None:
                bar.close(f"{info.status.value} at step {info.summary.step or '?'}")
        if info.status not in TERMINAL_STATUSES:  # the stream ended early: fall back to polling
            while self.refresh().status not in TERMINAL_STATUSES:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {self.id} had not ended after {timeout} s")
                time.sleep(0.5)
        return self

    # ---- data ---------------------------------------------------------------------------------------
    def metrics(self, page_size: int = PAGE) -> pd.DataFrame:
        """Every `scalars` event stored so far (one row per logged step, never sampled): columns seq,
        step, time and one per metric (NaN where a step has no value)."""
        pd = require_pandas()
        cols: dict[str, list[Any]] = {"seq": [], "step": [], "time": []}
        values: dict[str, list[Any]] = {}
        after = 0
        while True:
            page = ScalarsPage.model_validate_json(
                self.client.request(
                    "GET", f"/api/runs/{self.id}/scalars", params={"after": after, "limit": page_size}
                ).content
            )
            cols["seq"] += page.seq
            cols["step"] += page.step
            cols["time"] += page.time
            for name, column in page.values.items():
                values.setdefault(name, []).extend(
                    NON_FINITE[v] if isinstance(v, str) else (float("nan") if v is None else v)
                    for v in column
                )
            if page.next_after is None:
                break
            after = page.next_after
        frame = pd.DataFrame({**cols, **values})
        return frame.astype({"seq": "int64", "step": "int64", "time": "float64"})

    # ---- acting on a run ----------------------------------------------------------------------------
    def cancel(self) -> Run:
        """Cancel: a queued run ends at once, a running one within about a second."""
        self._info = RunPublic.model_validate(
            self.client.request("POST", f"/api/runs/{self.id}/cancel").json(), context=STORED
        )
        return self

    def delete(self) -> None:
        """Delete the run and its history (a running run must be cancelled first)."""
        self.client.request("DELETE", f"/api/runs/{self.id}")

    def fork(self, step: int | Literal["now"], **changes: Any) -> Run:
        """A new run from this run's state after `step` ("now": a running run checkpoints at its next
        step), with the spec `changes` (e.g. lr=1e-3)."""
        body = self.client.request(
            "POST", f"/api/runs/{self.id}/fork", json={"step": step, "changes": changes}
        ).json()
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise NormlabError(f"The server answered the fork without a run id: {body!r}")
        return Run(self.client, body["id"])

    def resume(self) -> Run:
        """Continue this `lost` run (its worker died) as the same run, from its latest checkpoint."""
        self.client.request("POST", f"/api/runs/{self.id}/resume")
        self._info = None
        return self

    def intervene(self, **knobs: Any) -> dict[str, Any]:
        """Change knobs of the running run (lr, weight_decay, momentum, freeze_gain) from its next step;
        returns the server's answer ({"run_id", "changes"})."""
        if not knobs:
            raise ValueError("name at least one knob to change, e.g. run.intervene(lr=1e-4)")
        answer: dict[str, Any] = self.client.request(
            "POST", f"/api/runs/{self.id}/interventions", json=knobs
        ).json()
        return answer

    def plot(self, smoothing: float = 0.6, live: bool | None = None) -> go.Figure:
        """The run's curves as the dashboard draws them: a live FigureWidget in Jupyter, a static figure
        elsewhere (live=False forces static). Static PNG/SVG files (`fig.write_image`) need plotly's
        image engine, which the client does not install: `pip install kaleido`; or use the figure's
        camera button in the notebook (the browser draws the PNG), or `fig.write_html`."""
        from normlab_client.plot import plot_runs

        return plot_runs([self], smoothing=smoothing, live=live)
