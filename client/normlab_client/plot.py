"""`plot_runs`: runs' curves as the dashboard draws them (colour per normalizer, debiased EMA over a faint
raw series), as a live plotly FigureWidget fed by the event stream in Jupyter, a static Figure elsewhere."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from normlab_client.api_models import RunPublic
from normlab_client.events import TERMINAL_STATUSES, Event
from normlab_client.palette import RAW_OPACITY, ema, norm_color

if TYPE_CHECKING:
    import plotly.graph_objects as go


class Plottable(Protocol):
    """What a plot reads of a run (normlab_client.Run)."""

    id: str

    @property
    def info(self) -> RunPublic: ...
    def refresh(self) -> RunPublic: ...
    def metrics(self) -> Any: ...
    def events(self, live: bool = True, after: int = 0) -> Iterator[Event]: ...


PANELS = (("train_loss", "Training loss"), ("val_loss", "Validation loss"))
METRICS = (
    ("accuracy", "Validation accuracy"),
    ("bpc", "Validation bits per character"),
    ("recall", "Recall"),
)
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
FLUSH_S = 0.25  # live appends are drawn at most ~4 times a second


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a FigureWidget draws and updates)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _finite(v: Any) -> float | None:
    return None if v is None or v != v or v in (float("inf"), float("-inf")) else float(v)


class _Trace:
    """Where one run's metric is drawn: its raw and smoothed traces and the EMA state to continue."""

    def __init__(self, raw: int, smooth: int | None, state: tuple[float, int]):
        self.raw, self.smooth, self.state = raw, smooth, state


def build_figure(
    runs: Sequence[Plottable], frames: list[Any], smoothing: float
) -> tuple[go.Figure, dict[tuple[str, str], _Trace]]:
    """(the static figure, {(run id, metric): _Trace}) from each run's metrics DataFrame."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = list(PANELS)
    for name, title in METRICS:
        if any(name in f and f[name].notna().any() for f in frames):
            panels.append((name, title))
            break
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[t for _, t in panels])
    seen: dict[str, int] = {}
    where: dict[tuple[str, str], _Trace] = {}
    for run, frame in zip(runs, frames, strict=True):
        spec = run.info.spec
        color = norm_color(spec.norm)
        dash = DASHES[seen.get(spec.norm, 0) % len(DASHES)]
        seen[spec.norm] = seen.get(spec.norm, 0) + 1
        label = f"{spec.norm} · bs {spec.batch_size} · seed {spec.seed} · {run.id}"
        for col, (name, _title) in enumerate(panels, start=1):
            rows = frame[frame[name].notna()] if name in frame else frame.iloc[0:0]
            xs, ys = rows["step"].tolist(), [_finite(v) for v in rows[name].tolist()] if name in frame else []
            smoothed, state = ema(ys, smoothing)
            first = col == 1
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name=label,
                    legendgroup=run.id,
                    showlegend=first and not smoothing,
                    line={"color": color, "dash": dash, "width": 1},
                    opacity=RAW_OPACITY if smoothing else 1.0,
                ),
                row=1,
                col=col,
            )
            raw_index = len(fig.data) - 1
            smooth_index = None
            if smoothing:
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=smoothed,
                        mode="lines",
                        name=label,
                        legendgroup=run.id,
                        showlegend=first,
                        line={"color": color, "dash": dash, "width": 2},
                    ),
                    row=1,
                    col=col,
                )
                smooth_index = len(fig.data) - 1
            where[(run.id, name)] = _Trace(raw_index, smooth_index, state)
    fig.update_layout(
        template="plotly_white",
        height=360,
        margin={"t": 40, "l": 50, "r": 10, "b": 40},
        legend={"orientation": "h", "y": -0.2},
        hovermode="x unified",
    )
    fig.update_xaxes(title_text="step")
    return fig, where


def plot_runs(runs: Sequence[Plottable], smoothing: float = 0.6, live: bool | None = None) -> go.Figure:
    """The runs' curves; live (a FigureWidget extended as events arrive) by default in Jupyter while any
    run is still going, else a static Figure of what is stored."""
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    for run in runs:
        run.refresh()
    frames = [run.metrics() for run in runs]
    fig, where = build_figure(runs, frames, smoothing)
    if live is None:
        live = in_notebook() and any(r.info.status not in TERMINAL_STATUSES for r in runs)
    if not live:
        return fig
    widget = live_figure(fig)
    for run, frame in zip(runs, frames, strict=True):
        after = int(frame["seq"].max()) if len(frame) else 0
        thread = threading.Thread(target=_feed, args=(widget, run, after, where, smoothing), daemon=True)
        thread.start()
        widget._normlab_feeds.append(thread)
    return widget


def live_figure(fig: go.Figure) -> go.FigureWidget:
    """A FigureWidget of `fig` with `wait(timeout)`: returns once every run it follows has ended and its
    last points are drawn (True), or after `timeout` seconds (False)."""
    import plotly.graph_objects as go

    # plotly defines FigureWidget at import time, so mypy sees Any; the subclass only adds wait()
    class LiveFigure(go.FigureWidget):  # type: ignore[misc]
        def wait(self, timeout: float | None = None) -> bool:
            deadline = None if timeout is None else time.monotonic() + timeout
            for thread in self._normlab_feeds:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            return not any(t.is_alive() for t in self._normlab_feeds)

    widget = LiveFigure(fig)
    widget._normlab_feeds = []
    return widget


def _feed(
    widget: Any, run: Plottable, after: int, where: dict[tuple[str, str], _Trace], smoothing: float
) -> None:
    """Append the run's new scalars to the widget's traces until the run ends (batched, ~4 draws/s)."""
    pending: list[Any] = []
    last_draw = time.monotonic()
    try:
        for event in run.events(live=True, after=after):
            if event.kind == "scalars":
                pending.append(event)
            if pending and (event.terminal or time.monotonic() - last_draw > FLUSH_S):
                _draw(widget, run.id, pending, where, smoothing)
                pending, last_draw = [], time.monotonic()
        if pending:
            _draw(widget, run.id, pending, where, smoothing)
    except Exception:  # a notebook cell must not print a thread's traceback over the output
        return


def _draw(
    widget: Any, run_id: str, events: list[Any], where: dict[tuple[str, str], _Trace], smoothing: float
) -> None:
    with widget.batch_update():
        for (rid, name), trace in where.items():
            if rid != run_id:
                continue
            points = [
                (e.step, _finite(e.payload.get(name))) for e in events if e.payload.get(name) is not None
            ]
            if not points:
                continue
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            raw = widget.data[trace.raw]
            raw.x, raw.y = (*raw.x, *xs), (*raw.y, *ys)
            if trace.smooth is not None:
                smoothed, trace.state = ema(ys, smoothing, trace.state)
                sm = widget.data[trace.smooth]
                sm.x, sm.y = (*sm.x, *xs), (*sm.y, *smoothed)
