"""Callback logic as pure functions: URL ↔ page state, run lists → table rows. No Dash, no HTTP:
unit-tested. (The Lab's form is `frontend.lab_form`.)
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from frontend.smoothing import DEFAULT_WEIGHT
from normlab_client.events import ACTIVE_STATUSES, TERMINAL_STATUSES

RESULT_METRICS = ("accuracy", "bpc", "mse")  # a task's final metric (normlab_client.catalog)


# ---- URL state ---------------------------------------------------------------------------------


def encode_query(state: dict[str, Any]) -> str:
    """'?runs=a,b&smooth=0.6': lists joined by commas; empty and None values left out."""
    flat = {}
    for key, value in state.items():
        if value is None or value == "" or value == []:
            continue
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "1" if value else "0"
        flat[key] = str(value)
    return "?" + urlencode(flat, safe=",") if flat else ""


def decode_query(search: str | None) -> dict[str, str]:
    """The query string of a URL as {key: last value}."""
    return {k: v[-1] for k, v in parse_qs((search or "").lstrip("?")).items()}


def split_list(value: str | list[Any] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value if v]
    return [v for v in value.split(",") if v]


def clamp_float(value: Any, lo: float, hi: float, default: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return default
    return min(max(v, lo), hi) if v == v else default


MAX_RUNS = 24  # runs a Compare link names one by one
MAX_GROUP_RUNS = 240  # a group's link (or its runs, kept in the picker): every run, or its bands would lie


def compare_state(params: dict[str, Any], max_runs: int = MAX_RUNS) -> dict[str, Any]:
    """Compare page state from URL params, every value checked: runs, smooth, color, x, panels, present."""
    panels = [p for p in split_list(params.get("panels")) if p in ("loss", "val", "metric")]
    return {
        "runs": split_list(params.get("runs"))[:max_runs],
        # no smoothing in the URL: the default (dense curves readable); one the URL gives: kept as given
        "smooth": DEFAULT_WEIGHT
        if params.get("smooth") in (None, "")
        else clamp_float(params.get("smooth"), 0.0, 0.99, 0.0),
        "color": params.get("color") if params.get("color") in ("norm", "batch_size") else "norm",
        "x": params.get("x") if params.get("x") in ("step", "time") else "step",
        "panels": panels or ["loss", "val", "metric"],
    }


def cursor_of(runs: list[dict[str, Any]]) -> dict[str, int]:
    """{run id: last stored seq} for the runs still live: where this tab's stream starts."""
    return {r["id"]: int(r.get("last_seq") or 0) for r in runs if r.get("status") not in TERMINAL_STATUSES}


def is_present(params: dict[str, Any]) -> bool:
    return str(params.get("present", "")).lower() in ("1", "true", "yes", "on")


# ---- run lists ---------------------------------------------------------------------------------


def when(value: str | None) -> str:
    if not value:
        return ""
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return str(value)


def _metrics(run: dict[str, Any]) -> dict[str, Any]:
    m = (run.get("summary") or {}).get("metrics") or {}
    return m if isinstance(m, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def final_results(run: dict[str, Any]) -> dict[str, float | None]:
    """The run's final numbers for sortable columns: val loss; accuracy, bpc or mse (the test split's,
    else the validation split's); steps per second (steps ÷ wall time, set-up included); wall time (s).
    None where the run has not ended or did not measure it."""
    m = _metrics(run)
    summary = run.get("summary") or {}
    out: dict[str, float | None] = {"val_loss": _number(m.get("val_loss"))}
    for name in RESULT_METRICS:
        out[name] = next(
            (
                v
                for v in (_number(m.get(f"test_{name}")), _number(m.get(f"val_{name}")), _number(m.get(name)))
                if v is not None
            ),
            None,
        )
    wall, step = _number(summary.get("wall_time")), _number(summary.get("step"))
    out["wall_time"] = round(wall, 2) if wall is not None else None
    out["steps_per_s"] = round(step / wall, 1) if wall and step is not None else None
    return out


def final_metric(run: dict[str, Any]) -> str:
    """The run's final headline numbers as text ('val_loss 0.1235 · accuracy 0.95'), or ''."""
    results = final_results(run)
    parts = [f"{key} {results[key]:.4g}" for key in ("val_loss", *RESULT_METRICS) if results[key] is not None]
    return " · ".join(parts[:2])


def group_link(group_id: str | None) -> str:
    """A run's group (preset or sweep) as a Markdown link to Compare's view of it (bands, verdicts)."""
    return f"[{group_id}](/compare?group={group_id})" if group_id else ""


def run_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the Runs table (one per run), flat; the results numeric, so they sort as numbers."""
    rows = []
    for r in items:
        spec = r.get("spec") or {}
        rows.append(
            {
                "id": r["id"],
                "status": r.get("status", ""),
                "task": spec.get("task", ""),
                "norm": spec.get("norm", ""),
                "batch_size": spec.get("batch_size"),
                "seed": spec.get("seed"),
                "steps": spec.get("steps"),
                "owner": r.get("owner") or "",
                "name": r.get("name") or "",
                "tags": ", ".join(r.get("tags") or []),
                "note": r.get("note") or "",  # no column: the edit card below the table shows it
                "group": group_link(r.get("group_id")),
                "created": when(r.get("created_at")),
                **final_results(r),
                "device": r.get("device") or "",
                "link": f"[{r['id']}](/run/{r['id']})",
            }
        )
    return rows


def runs_query(filters: dict[str, Any], limit: int = 200) -> dict[str, Any]:
    """Query parameters of GET /api/runs from the Runs page filters (empty filters left out)."""
    q = {k: v for k, v in filters.items() if v not in (None, "", [])}
    q["limit"] = limit
    return q


def can_cancel(status: str) -> bool:
    return status in ACTIVE_STATUSES
