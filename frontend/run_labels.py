"""A run's name, tags and note: shown filled in, saved with `PATCH /api/runs/{id}` (its owner or an admin;
anyone else gets the API's refusal as the message) — on the Run page for its run, and on the Runs page
for the one run selected in the table (the same fields, with ids of its own). Hidden in presentation mode
(a form)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from frontend import data, ids
from frontend.api_client import attempt
from frontend.auth_box import TOKEN_STORE


@dataclass(frozen=True)
class FieldIds:
    """The component ids of one page's copy of the fields."""

    name: str
    tags: str
    note: str
    save: str
    message: str


RUN_PAGE = FieldIds(ids.RUN_NAME, ids.RUN_TAGS, ids.RUN_NOTE, ids.RUN_LABELS_SAVE, ids.RUN_LABELS_MESSAGE)
RUNS_PAGE = FieldIds(
    ids.RUNS_NAME, ids.RUNS_TAGS, ids.RUNS_NOTE, ids.RUNS_LABELS_SAVE, ids.RUNS_LABELS_MESSAGE
)


def labels_card(
    run: dict[str, Any], fields: FieldIds = RUN_PAGE, title: str = "Name, tags and note"
) -> html.Div:
    """Name, tags (comma-separated) and a markdown note of the run, with a Save button."""
    return html.Div(
        className="card controls run-labels",
        children=[
            html.H2(title),
            html.Div(
                className="fork-fields",
                children=[
                    html.Label(
                        ["Name", dcc.Input(id=fields.name, value=run.get("name") or "", maxLength=200)]
                    ),
                    html.Label(
                        [
                            "Tags (comma-separated)",
                            dcc.Input(id=fields.tags, value=tags_text(run.get("tags"))),
                        ]
                    ),
                ],
            ),
            html.Label(
                ["Note (markdown)", dcc.Textarea(id=fields.note, value=run.get("note") or "", rows=3)],
                className="wide",
            ),
            html.Button("Save", id=fields.save, className="btn small"),
            html.Span(id=fields.message, className="message", role="status"),
        ],
    )


def tags_text(tags: list[str] | str | None) -> str:
    """Tags as the field shows them: 'a, b' (a Runs table row carries them joined already)."""
    return tags if isinstance(tags, str) else ", ".join(tags or [])


def labels_of(name: str | None, tags: str | None, note: str | None) -> dict[str, Any]:
    """The PATCH body: empty name or note clears it; tags split on commas, blanks dropped, each once."""
    split = [t.strip() for t in (tags or "").split(",")]
    return {
        "name": (name or "").strip() or None,
        "tags": list(dict.fromkeys(t for t in split if t)),
        "note": (note or "").strip() or None,
    }


def on_save(
    _n: int | None,
    run_id: str | None,
    name: str | None,
    tags: str | None,
    note: str | None,
    token: str | None,
) -> object:
    if not run_id:
        return no_update
    return save(run_id, name, tags, note, token)


def save(run_id: str, name: str | None, tags: str | None, note: str | None, token: str | None) -> str:
    """PATCH the fields; "Saved." or the API's refusal (not the owner, a bad tag: what to change)."""
    return attempt(lambda: data.api(token).label(run_id, labels_of(name, tags, note)), "Saved.")


def register(app: Dash) -> None:
    """This module's callbacks on `app` (frontend/app.py's create_app calls this for every app it builds)."""
    app.callback(
        Output(ids.RUN_LABELS_MESSAGE, "children"),
        Input(ids.RUN_LABELS_SAVE, "n_clicks"),
        State(ids.RUN_ID, "data"),
        State(ids.RUN_NAME, "value"),
        State(ids.RUN_TAGS, "value"),
        State(ids.RUN_NOTE, "value"),
        State(TOKEN_STORE, "data"),
        prevent_initial_call=True,
    )(on_save)
