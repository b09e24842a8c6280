"""Callback logic as pure functions: form → RunSpec JSON, API errors → field messages, URL ↔ page state,
run lists → table rows. No Dash, no HTTP: unit-tested.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from normlab.catalog import TASKS
from normlab.events import ACTIVE_STATUSES, TERMINAL_STATUSES
from normlab.spec import RunSpec

# The Lab form, in display order: (field, label, widget kind). Sequence-only fields last.
FORM_FIELDS = [
    ("batch_size", "Batch size", "int"),
    ("steps", "Steps", "int"),
    ("lr", "Learning rate", "float"),
    ("optimizer", "Optimizer", "choice"),
    ("seed", "Seed", "int"),
    ("hidden_size", "Hidden units", "int"),
    ("layers", "Layers", "int"),
    ("gain_init", "Initial gain", "float"),
    ("eval_every", "Evaluate every (steps)", "int"),
    ("cell", "Recurrent cell", "choice"),
    ("seq_len", "Sequence length", "int"),
    ("eval_seq_len", "Evaluation length", "int"),
    ("ln_placement", "LayerNorm placement (LSTM)", "choice"),
    ("probes", "Probes", "flag"),
]
SEQUENCE_ONLY = {"cell", "seq_len", "eval_seq_len", "ln_placement"}


def field_defaults(task: str) -> dict[str, Any]:
    """The values the form shows for a task: `RunSpec.resolved()`'s, the probes box as its checklist value."""
    spec = RunSpec.model_validate({"task": task}).resolved()
    values = spec.model_dump()
    out: dict[str, Any] = {name: values[name] for name, _, kind in FORM_FIELDS if kind != "flag"}
    out["probes"] = ["on"] if spec.probes.enabled else []
    return out


def build_spec(task: str, norm: str, values: dict[str, Any]) -> dict[str, Any]:
    """RunSpec JSON from the form: empty fields left out (the API fills the task's defaults), fields
    that a non-sequential task does not have left out. Validation is the API's job, not ours."""
    spec: dict[str, Any] = {"task": task, "norm": norm}
    sequential = TASKS[task].kind == "sequence" if task in TASKS else False
    for name, _label, kind in FORM_FIELDS:
        value = values.get(name)
        if name in SEQUENCE_ONLY and not sequential:
            continue
        if kind == "flag":
            if value:
                spec["probes"] = {"enabled": True}
            continue
        if value is None or value == "":
            continue
        spec[name] = value
    return spec


def parse_int_list(text: str | None, what: str) -> list[int]:
    """'4, 32 128' -> [4, 32, 128]; a ValueError whose message says what to type otherwise."""
    parts = [p for p in re.split(r"[\s,;]+", text or "") if p]
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{what}: type whole numbers separated by commas, e.g. 4, 32, 128") from None


def sweep_body(spec: dict[str, Any], norms: list[str], batch_text: str | None,
               seed_text: str | None) -> dict[str, Any]:
    """SweepCreate JSON: the base spec crossed with the chosen normalizers, batch sizes and seeds."""
    return {"base": spec, "norms": list(norms or []),
            "batch_sizes": parse_int_list(batch_text, "Batch sizes"),
            "seeds": parse_int_list(seed_text, "Seeds")}


def field_messages(error_fields: dict[str, str], names: list[str]) -> dict[str, str]:
    """Map the API's per-field messages (keys like 'batch_size', 'base.batch_size', 'probes.budget',
    'batch_sizes') onto the form's field names; messages for the same field are joined."""
    aliases = {"batch_sizes": "batch_size", "norms": "norm", "seeds": "seed", "enabled": "probes"}
    out: dict[str, str] = {}
    for key, msg in (error_fields or {}).items():
        parts = [p for p in re.split(r"[.\[\]]", str(key)) if p and p not in ("base", "body")]
        target = None
        for p in parts:
            p = aliases.get(p, p)
            if p in names:
                target = p
                break
        if target is None and parts and parts[0] == "probes":
            target = "probes"
        if target is not None:
            out[target] = f"{out[target]} {msg}".strip() if target in out else msg
    return out


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


def split_list(value: str | list | None) -> list[str]:
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


def compare_state(params: dict[str, Any]) -> dict[str, Any]:
    """Compare page state from URL params, every value checked: runs, smooth, color, x, panels, present."""
    panels = [p for p in split_list(params.get("panels")) if p in ("loss", "val", "metric")]
    return {
        "runs": split_list(params.get("runs"))[:24],
        "smooth": clamp_float(params.get("smooth"), 0.0, 0.99, 0.0),
        "color": params.get("color") if params.get("color") in ("norm", "batch_size") else "norm",
        "x": params.get("x") if params.get("x") in ("step", "time") else "step",
        "panels": panels or ["loss", "val", "metric"],
    }


def cursor_of(runs: list[dict]) -> dict[str, int]:
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


def final_metric(run: dict) -> str:
    """The run's final headline number as text ('val_loss 0.123 · accuracy 0.95'), or ''."""
    m = (run.get("summary") or {}).get("metrics") or run.get("summary") or {}
    parts = []
    for key in ("val_loss", "accuracy", "bpc", "test_accuracy"):
        v = m.get(key) if isinstance(m, dict) else None
        if isinstance(v, int | float):
            parts.append(f"{key} {v:.4g}")
    return " · ".join(parts[:2])


def run_rows(items: list[dict]) -> list[dict]:
    """Rows of the Runs table (one per run), flat and sortable."""
    rows = []
    for r in items:
        spec = r.get("spec") or {}
        rows.append({
            "id": r["id"], "status": r.get("status", ""), "task": spec.get("task", ""),
            "norm": spec.get("norm", ""), "batch_size": spec.get("batch_size"), "seed": spec.get("seed"),
            "steps": spec.get("steps"), "owner": r.get("owner") or "", "group": r.get("group_id") or "",
            "created": when(r.get("created_at")), "result": final_metric(r),
            "device": r.get("device") or "", "link": f"[{r['id']}](/run/{r['id']})",
        })
    return rows


def runs_query(filters: dict[str, Any], limit: int = 200) -> dict[str, Any]:
    """Query parameters of GET /api/runs from the Runs page filters (empty filters left out)."""
    q = {k: v for k, v in filters.items() if v not in (None, "", [])}
    q["limit"] = limit
    return q


def can_cancel(status: str) -> bool:
    return status in ACTIVE_STATUSES
