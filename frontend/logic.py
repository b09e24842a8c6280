"""Callback logic as pure functions: form → RunSpec JSON, API errors → field messages, URL ↔ page state,
run lists → table rows, Table 1 (paper) beside Table 1 (computed). No Dash, no HTTP: unit-tested.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from normlab.catalog import TASKS
from normlab.events import TERMINAL_STATUSES

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
STATUS_CLASSES = {
    "queued": "badge queued", "running": "badge running", "completed": "badge completed",
    "failed": "badge failed", "cancelled": "badge cancelled", "diverged": "badge diverged",
    "lost": "badge lost",
}


def field_defaults(task: str) -> dict[str, Any]:
    """The values the form shows for a task: its defaults, as `RunSpec.resolved()` would fill them."""
    info = TASKS[task]
    out: dict[str, Any] = {
        "batch_size": info.batch_size, "steps": info.steps, "lr": info.lr, "optimizer": "adam", "seed": 0,
        "hidden_size": info.hidden_size, "layers": info.layers, "gain_init": 1.0, "eval_every": 50,
        "probes": [],
    }
    if info.kind == "sequence":
        out.update(cell=info.cells[0] if info.cells else "lstm", seq_len=info.seq_len,
                   eval_seq_len=info.seq_len, ln_placement="full")
    else:
        out.update(cell=None, seq_len=None, eval_seq_len=None, ln_placement="full")
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
    return status in ("queued", "running")


# ---- Table 1 -----------------------------------------------------------------------------------

METHODS = ["batch", "weight", "layer"]
METHOD_NAMES = {"batch": "Batch norm", "weight": "Weight norm", "layer": "Layer norm"}
TRANSFORMS = ["w_matrix_scale", "w_matrix_shift", "w_vector_scale", "data_scale", "data_shift",
              "case_scale"]
TRANSFORM_NAMES = {
    "w_matrix_scale": "Weight matrix re-scaling", "w_matrix_shift": "Weight matrix re-centering",
    "w_vector_scale": "Weight vector re-scaling", "data_scale": "Dataset re-scaling",
    "data_shift": "Dataset re-centering", "case_scale": "Single training case re-scaling",
}
# Table 1 exactly as the paper prints it (True = "Invariant", False = "No"). Text, not a result.
PAPER_TABLE = {
    "batch": [True, False, True, True, True, False],
    "weight": [True, False, True, False, False, False],
    "layer": [True, True, False, True, False, True],
}
PROSE_NOTE = ("§5.1's prose says \"all the normalization methods are invariant to re-scaling the "
              "dataset\", but Table 1 prints \"No\" for weight normalization. The computed cell decides.")


def method_key(name: str) -> str | None:
    n = re.sub(r"[^a-z]", "", str(name).lower())
    for m in METHODS:
        if n.startswith(m):
            return m
    return None


def transform_key(name: str) -> str | None:
    n = re.sub(r"[^a-z]", "", str(name).lower())
    scale = "scal" in n
    shift = "cent" in n or "shift" in n
    if "matrix" in n:
        return "w_matrix_scale" if scale else "w_matrix_shift" if shift else None
    if "vector" in n or "row" in n or "neuron" in n:
        return "w_vector_scale" if scale else None
    if "case" in n or "single" in n or "example" in n:
        return "case_scale" if scale else None
    if "data" in n or "input" in n:
        return "data_scale" if scale else "data_shift" if shift else None
    return None


def _cells(computed: Any) -> list[dict]:
    """Flatten the engine's Table 1 JSON, whatever its nesting, into cell dicts."""
    if isinstance(computed, list):
        return [c for c in computed if isinstance(c, dict)]
    if not isinstance(computed, dict):
        return []
    if isinstance(computed.get("methods"), dict):  # the engine's: {methods: {m: {t: bool}}, max_abs_diff}
        diffs = computed.get("max_abs_diff") or {}
        return [{"method": m, "transform": t, "invariant": v, "max_abs_diff": (diffs.get(m) or {}).get(t)}
                for m, row in computed["methods"].items() for t, v in (row or {}).items()]
    for key in ("cells", "results", "table", "rows"):
        if key in computed:
            inner = computed[key]
            if isinstance(inner, dict):  # {method: {transform: cell}}
                out = []
                for m, row in inner.items():
                    for t, cell in (row or {}).items():
                        cell = cell if isinstance(cell, dict) else {"invariant": cell}
                        out.append({"method": m, "transform": t, **cell})
                return out
            return _cells(inner)
    return []


def _invariant(cell: dict) -> bool | None:
    for key in ("invariant", "computed", "value", "result"):
        v = cell.get(key)
        if isinstance(v, bool):
            return v
        if isinstance(v, str):
            return v.lower().startswith("inv") or v.lower() in ("yes", "true")
    return None


def _difference(cell: dict) -> float | None:
    for key in ("max_abs_diff", "max_diff", "difference", "diff", "max_abs_change", "max_relative_diff",
                "rel_diff", "delta"):
        v = cell.get(key)
        if isinstance(v, int | float):
            return float(v)
    return None


def extra_invariance_rows(computed: Any) -> dict[str, list[dict]]:
    """Methods beyond the paper's three (e.g. RMSNorm, none) that the engine also computed."""
    out: dict[str, list[dict]] = {}
    for cell in _cells(computed):
        name = str(cell.get("method") or "")
        t = transform_key(cell.get("transform") or "")
        if method_key(name) is None and t:
            out.setdefault(name, []).append({"transform": t, "computed": _invariant(cell),
                                             "difference": _difference(cell)})
    for rows in out.values():
        rows.sort(key=lambda r: TRANSFORMS.index(r["transform"]))
    return out


def invariance_table(computed: Any) -> list[dict]:
    """18 rows, one per (method, transform): the paper's answer, the computed one, the measured output
    difference, whether they agree, and a note on the one cell where prose and table disagree."""
    found: dict[tuple[str, str], dict] = {}
    for cell in _cells(computed):
        m = method_key(cell.get("method") or cell.get("norm") or cell.get("normalizer") or "")
        t = transform_key(cell.get("transform") or cell.get("transformation") or cell.get("name") or "")
        if m and t:
            found[(m, t)] = cell
    rows = []
    for m in METHODS:
        for j, t in enumerate(TRANSFORMS):
            cell = found.get((m, t), {})
            comp = _invariant(cell) if cell else None
            paper = PAPER_TABLE[m][j]
            note = cell.get("note") or cell.get("explanation") or ""
            if (m, t) == ("weight", "data_scale"):
                note = (note + " " if note else "") + PROSE_NOTE
            rows.append({"method": m, "transform": t, "paper": paper, "computed": comp,
                         "difference": _difference(cell), "agrees": None if comp is None else comp == paper,
                         "note": note})
    return rows
