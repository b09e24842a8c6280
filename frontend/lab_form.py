"""The Lab's run builder as pure functions: its fields, their defaults (RunSpec's) and limits (the
server's, from GET /api/catalog), the RunSpec JSON it posts, and the URL query that restores it.
No Dash, no HTTP: unit-tested.
"""

from __future__ import annotations

import math
import re
from typing import Any

from normlab_client.catalog import TASKS
from normlab_client.spec import TRANSFORMER_TASKS, ProbeSpec, RunSpec

# The Lab form, in display order: (field, label, widget kind). Sequence-only fields after the model's.
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
    ("ln_position", "LayerNorm position (Transformer)", "choice"),
    ("weight_standardization", "Weight Standardization", "bool"),
    ("probes", "Probes", "flag"),
]
# Under the Probes box, shown while probes are on; they go into RunSpec.probes.
PROBE_FIELDS = [
    ("trace_every", "Trace every (steps)", "int"),
    ("fisher_every", "Fisher every (steps)", "int"),
    ("budget", "Probe budget (% of training time)", "percent"),
    ("hessian", "Hessian", "bool"),
    ("empirical_fisher", "Empirical Fisher", "bool"),
]
CHECK_TEXT = {  # what ticking a check box does (the label above it is in capitals: no Greek there)
    "probes": " record hidden-state traces and Fisher curvature",
    "hessian": " also λ_max of the Hessian (edge of stability: η·λ against 2)",
    "empirical_fisher": " also the empirical Fisher (observed labels; a comparison, not curvature)",
    "weight_standardization": " standardize each conv filter over its fan-in (with a normalizer after it)",
}
ALL_FIELDS = FORM_FIELDS + PROBE_FIELDS
KINDS = {name: kind for name, _, kind in ALL_FIELDS}
LABELS = {name: label for name, label, _ in ALL_FIELDS} | {"norm": "Normalizer"}
PROBE_NAMES = [name for name, _, _ in PROBE_FIELDS]
NUMERIC = {name for name, kind in KINDS.items() if kind in ("int", "float", "percent")}
SEQUENCE_ONLY = {"cell", "seq_len", "eval_seq_len", "ln_placement"}
TRANSFORMER_ONLY = {"ln_position"}
IMAGE_ONLY = {"weight_standardization"}


def applies(name: str, task: str) -> bool:
    """Whether the form shows field `name` for `task`: sequence-only fields for sequential tasks, the
    Transformer's LayerNorm position for Transformer tasks, Weight Standardization for ConvNet tasks."""
    kind = TASKS[task].kind if task in TASKS else None
    if name in SEQUENCE_ONLY:
        return kind == "sequence"
    if name in TRANSFORMER_ONLY:
        return task in TRANSFORMER_TASKS
    if name in IMAGE_ONLY:
        return kind == "image"
    return True


COMPACT = {"batch_size", "steps"}  # the fields presentation mode keeps (with task, normalizer, Start)


def field_defaults(task: str) -> dict[str, Any]:
    """The values the form shows for a task: `RunSpec.resolved()`'s; check boxes as checklist values,
    the probe budget in percent."""
    spec = RunSpec.model_validate({"task": task}).resolved()
    values = spec.model_dump()
    out: dict[str, Any] = {}
    for name, _, kind in FORM_FIELDS:
        if kind == "bool":  # a check box holds a list: ["on"] when ticked
            out[name] = ["on"] if values[name] else []
        elif kind != "flag":
            out[name] = values[name]
    out["probes"] = ["on"] if spec.probes.enabled else []
    probes = ProbeSpec().model_dump()
    for name, _, kind in PROBE_FIELDS:
        value = probes[name]
        out[name] = (
            (["on"] if value else [])
            if kind == "bool"
            else (_round(value * 100) if kind == "percent" else value)
        )
    return out


def _round(x: float) -> float | int:
    """A percentage as people type it: 15, not 15.000000000000002."""
    r = round(x, 6)
    return int(r) if r == int(r) else r


def field_limits(catalog_fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{field: {"min", "max", "min_open"}} for the numeric fields, from the catalog's JSON schema (the
    server's limits: its max_steps, its probe cadence); the budget in percent."""
    out: dict[str, dict[str, Any]] = {}
    for name in NUMERIC:
        prop = (catalog_fields.get("probes", {}) if name in PROBE_NAMES else catalog_fields).get(name) or {}
        numeric = [b for b in [prop, *prop.get("anyOf", [])] if b.get("type") in ("integer", "number")]
        branch: dict[str, Any] = numeric[0] if numeric else {}
        scale = 100 if KINDS[name] == "percent" else 1
        lo, lo_open = branch.get("minimum"), False
        if lo is None and branch.get("exclusiveMinimum") is not None:
            lo, lo_open = branch["exclusiveMinimum"], True
        hi = branch.get("maximum")
        out[name] = {
            "min": None if lo is None else _round(lo * scale),
            "max": None if hi is None else _round(hi * scale),
            "min_open": lo_open,
        }
    return out


def range_text(name: str, limits: dict[str, dict[str, Any]]) -> str:
    """'a whole number from 1 to 20000', 'a number above 0, at most 10'."""
    lim = limits.get(name, {})
    what = "a whole number" if KINDS.get(name) == "int" else "a number"
    lo, hi = lim.get("min"), lim.get("max")
    if lo is not None and lim.get("min_open"):
        return f"{what} above {lo}" + (f", at most {hi}" if hi is not None else "")
    if lo is not None and hi is not None:
        return f"{what} from {lo} to {hi}"
    if lo is not None:
        return f"{what} of at least {lo}"
    return what


def visible_fields(task: str, probes_on: bool) -> list[str]:
    """The fields the form shows for this task: sequence-only ones for sequential tasks, the probe
    settings while probes are on."""
    names = [n for n, _, _ in FORM_FIELDS if applies(n, task)]
    return names + (PROBE_NAMES if probes_on else [])


def missing_messages(task: str, values: dict[str, Any], limits: dict[str, dict[str, Any]]) -> dict[str, str]:
    """{field: message} for each shown number field left empty. The browser also hands an entry outside
    the field's min..max over as empty, so the message names the range either way."""
    shown = visible_fields(task, bool(values.get("probes")))
    out = {}
    for name in shown:
        value = values.get(name)
        empty = value is None or value == "" or (isinstance(value, float) and math.isnan(value))
        if name in NUMERIC and empty:
            out[name] = f"Required: enter {range_text(name, limits)}."
    return out


def build_spec(task: str, norm: str, values: dict[str, Any]) -> dict[str, Any]:
    """RunSpec JSON from the form: fields a non-sequential task does not have left out, the probe
    settings under "probes" when probes are on. Empty fields are the caller's to refuse first
    (`missing_messages`); range checks are the API's job, not ours."""
    spec: dict[str, Any] = {"task": task, "norm": norm}
    shown = visible_fields(task, bool(values.get("probes")))
    for name in shown:
        value, kind = values.get(name), KINDS[name]
        if kind == "flag":
            if value:
                spec["probes"] = {"enabled": True}
            continue
        if name in PROBE_NAMES:
            continue
        if kind == "bool":  # a check box: only a ticked one goes into the spec
            if value:
                spec[name] = True
            continue
        if value is None or value == "":
            continue
        spec[name] = value
    if "probes" in spec:
        for name in PROBE_NAMES:
            value, kind = values.get(name), KINDS[name]
            if kind == "bool":
                spec["probes"][name] = bool(value)
            elif value is not None and value != "":
                spec["probes"][name] = value / 100 if kind == "percent" else value
    return spec


def parse_int_list(text: str | None, what: str) -> list[int]:
    """'4, 32 128' -> [4, 32, 128]; a ValueError whose message says what to type otherwise."""
    parts = [p for p in re.split(r"[\s,;]+", text or "") if p]
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{what}: type whole numbers separated by commas, e.g. 4, 32, 128") from None


def sweep_body(
    spec: dict[str, Any], norms: list[str], batch_text: str | None, seed_text: str | None
) -> dict[str, Any]:
    """SweepCreate JSON: the base spec crossed with the chosen normalizers, batch sizes and seeds."""
    return {
        "base": spec,
        "norms": list(norms or []),
        "batch_sizes": parse_int_list(batch_text, "Batch sizes"),
        "seeds": parse_int_list(seed_text, "Seeds"),
    }


def field_messages(error_fields: dict[str, str], names: list[str]) -> dict[str, str]:
    """Map the API's per-field messages (keys like 'batch_size', 'base.batch_size', 'probes.budget',
    'batch_sizes') onto the form's field names, the most specific part first ('probes.budget' goes to
    the budget field when the form has one, else to the Probes box); messages for one field are joined."""
    aliases = {"batch_sizes": "batch_size", "norms": "norm", "seeds": "seed", "enabled": "probes"}
    out: dict[str, str] = {}
    for key, msg in (error_fields or {}).items():
        parts = [p for p in re.split(r"[.\[\]]", str(key)) if p and p not in ("base", "body")]
        target = next((aliases.get(p, p) for p in reversed(parts) if aliases.get(p, p) in names), None)
        if target is None and parts and parts[0] == "probes" and "probes" in names:
            target = "probes"
        if target is not None:
            out[target] = f"{out[target]} {msg}".strip() if target in out else msg
    return out


# ---- the form in the URL ----------------------------------------------------------------------
# The Lab's URL holds the board (runs=…) and every field that differs from the task's default, so a
# reload, the nav's way back (see pages/lab.py) and a copied link all rebuild the same Lab.


def parse_value(name: str, text: str) -> Any:
    """A query value as the field's widget holds it; None when it does not parse."""
    kind = KINDS.get(name)
    try:
        if kind == "int":
            return int(text)
        if kind in ("float", "percent"):
            v = float(text)
            return _round(v) if math.isfinite(v) else None
    except ValueError:
        return None
    if kind in ("bool", "flag"):
        return ["on"] if text.lower() in ("1", "on", "true", "yes") else []
    return text


def form_from_query(task: str, query: dict[str, Any]) -> dict[str, Any]:
    """The task's defaults with the query's field values on top (values that do not parse ignored)."""
    values = field_defaults(task)
    for name in KINDS:
        if query.get(name) is not None:
            value = parse_value(name, str(query[name]))
            if value is not None:
                values[name] = value
    return values


def query_from_spec(spec: dict[str, Any], **overrides: Any) -> dict[str, str]:
    """The Lab query that rebuilds the form of this (resolved) spec, with `overrides` on top (a field's
    value as the form shows it, e.g. budget=40 for 40 %): "run it again with …" links."""
    probes = spec.get("probes") or {}
    out = {"task": str(spec.get("task", "digits")), "norm": str(spec.get("norm", "layer"))}
    for name, kind in KINDS.items():
        value = (
            probes.get(name)
            if name in PROBE_NAMES
            else (probes.get("enabled") if kind == "flag" else spec.get(name))
        )
        if name in overrides:
            value = overrides[name]
        elif kind == "percent" and value is not None:
            value = _round(value * 100)
        if value is None:
            continue
        out[name] = ("1" if value else "0") if kind in ("flag", "bool") else str(value)
    return out


def budget_that_fits(log_events: list[dict[str, Any]]) -> float | None:
    """The probe budget (in %) a run's budget warning asks for: its `budget_needed`, or the "raise it to
    X %" in its message; None without such a warning."""
    for e in log_events:
        payload = e.get("payload") or {}
        if payload.get("budget_needed") is not None:
            return _round(float(payload["budget_needed"]) * 100)
        found = re.search(r"raise it to ([0-9.]+) ?%", str(payload.get("message", "")))
        if found:
            return _round(float(found.group(1)))
    return None
