"""The Run page's name, tags and note: shown filled in, saved with `PATCH /api/runs/{id}` (its owner or an
admin; anyone else gets the API's refusal as the message). Hidden in presentation mode (a form)."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, callback, dcc, html, no_update

from frontend import data, ids
from frontend.api_client import ApiError
from frontend.auth_box import TOKEN_STORE


def labels_card(run: dict[str, Any]) -> html.Div:
    """Name, tags (comma-separated) and a markdown note of the run, with a Save button."""
    return html.Div(
        className="card controls run-labels",
        children=[
            html.H2("Name, tags and note"),
            html.Div(
                className="fork-fields",
                children=[
                    html.Label(
                        ["Name", dcc.Input(id=ids.RUN_NAME, value=run.get("name") or "", maxLength=200)]
                    ),
                    html.Label(
                        [
                            "Tags (comma-separated)",
                            dcc.Input(id=ids.RUN_TAGS, value=", ".join(run.get("tags") or [])),
                        ]
                    ),
                ],
            ),
            html.Label(
                ["Note (markdown)", dcc.Textarea(id=ids.RUN_NOTE, value=run.get("note") or "", rows=3)],
                className="wide",
            ),
            html.Button("Save", id=ids.RUN_LABELS_SAVE, className="btn small"),
            html.Span(id=ids.RUN_LABELS_MESSAGE, className="message", role="status"),
        ],
    )


def labels_of(name: str | None, tags: str | None, note: str | None) -> dict[str, Any]:
    """The PATCH body: empty name or note clears it; tags split on commas, blanks dropped, each once."""
    split = [t.strip() for t in (tags or "").split(",")]
    return {
        "name": (name or "").strip() or None,
        "tags": list(dict.fromkeys(t for t in split if t)),
        "note": (note or "").strip() or None,
    }


@callback(
    Output(ids.RUN_LABELS_MESSAGE, "children"),
    Input(ids.RUN_LABELS_SAVE, "n_clicks"),
    State(ids.RUN_ID, "data"),
    State(ids.RUN_NAME, "value"),
    State(ids.RUN_TAGS, "value"),
    State(ids.RUN_NOTE, "value"),
    State(TOKEN_STORE, "data"),
    prevent_initial_call=True,
)
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
    try:
        data.api(token).label(run_id, labels_of(name, tags, note))
    except ApiError as exc:
        return exc.detail  # not the owner, a bad tag: the API says what to change
    return "Saved."
