"""The Lab's Start button: the form (or sweep) POSTed to the API, and its answer as the page shows it:
the new run ids, a message, and the API's messages under the fields they are about."""

from __future__ import annotations

from typing import Any

from dash import dcc

from frontend import components, data, lab_form
from frontend.api_client import ApiError
from frontend.lab_builder import FIELD_NAMES


def submit(
    task: str,
    norm: str,
    sweep: bool,
    sweep_norms: list[str] | None,
    sweep_batch: str | None,
    sweep_seeds: str | None,
    form: dict[str, Any],
    token: str | None = None,
    limits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """POST the run (or sweep); {"run_ids", "message", "errors": {field: the API's message}}.

    A shown number field left empty is refused here, with its range (the server's limits), instead of
    being left out of the spec — the API would quietly fill in the default."""
    names = FIELD_NAMES + lab_form.PROBE_NAMES + ["norm"]
    missing = lab_form.missing_messages(task, form, limits or {})
    if missing:
        return {"run_ids": [], "errors": missing, "message": _see_fields(missing)}
    spec = lab_form.build_spec(task, norm, form)
    try:
        if sweep:
            try:
                body = lab_form.sweep_body(spec, sweep_norms or [], sweep_batch, sweep_seeds)
            except ValueError as exc:
                return {"run_ids": [], "message": str(exc), "errors": {}}
            created = data.api(token).create_sweep(body)
            ids_, group = created["run_ids"], created["group_id"]
            return {
                "run_ids": ids_,
                "group": group,
                "errors": {},
                "message": [
                    "Started sweep ",
                    dcc.Link(group, href=f"/compare?group={group}", className="group-link"),
                    f": {len(ids_)} runs. Its results table and mean ± std bands are in ",
                    dcc.Link("Compare", href=f"/compare?group={group}"),
                    ".",
                ],
            }
        created = data.api(token).create_run(spec)
        try:  # the run as the API sees it now: queued behind others, or already taken by a worker
            run = data.api(token).run(created["id"])
        except ApiError:
            run = created
        return {"run_ids": [created["id"]], "errors": {}, "message": started_message(run)}
    except ApiError as exc:
        errors = lab_form.field_messages(exc.fields, names)
        shown = len(errors) >= len(exc.fields) > 0  # every message sits next to its field
        return {"run_ids": [], "errors": errors, "message": _see_fields(errors) if shown else exc.detail}


def started_message(run: dict[str, Any]) -> str:
    """'Started run X.' when a worker is free for it; while it waits, its place in the queue and an
    estimate (not a green "Started" for a run that waits behind others)."""
    note = components.queue_note(run)
    return f"Queued run {run['id']}: {note}." if note else f"Started run {run['id']}."


def _see_fields(errors: dict[str, str]) -> str:
    return f"Not started: see the message under {', '.join(lab_form.LABELS[f] for f in errors)}."
