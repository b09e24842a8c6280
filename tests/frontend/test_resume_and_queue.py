"""A lost run's page offers Resume (and says resume or resubmit), the button asks the API to resume it,
and the Lab's message about a queued run follows the run: its place while it waits, then that it
started or how it ended."""

from __future__ import annotations

import httpx
import pytest
from dash import no_update

from frontend import data
from frontend.api_client import ApiClient
from frontend.app import create_app
from frontend.lab_live import on_queue_message


@pytest.fixture(scope="module")
def run_page():
    create_app()  # Dash imports the pages (register_page needs an app first)
    from frontend.pages import run

    return run


def _buttons(component) -> dict[str, object]:
    """{id: style} of every button under a component tree."""
    found: dict[str, object] = {}

    def walk(c) -> None:
        if isinstance(c, list | tuple):
            for x in c:
                walk(x)
            return
        if type(c).__name__ == "Button":
            found[c.id] = getattr(c, "style", None)
        children = getattr(c, "children", None)
        if children is not None and not isinstance(children, str):
            walk(children)

    walk(component)
    return found


def test_only_a_lost_run_shows_resume(run_page):
    from frontend import ids

    lost = {"id": "r1", "status": "lost", "spec": {"norm": "layer"}}
    running = {**lost, "status": "running"}
    assert _buttons(run_page.header(lost))[ids.RUN_RESUME] == {}
    assert _buttons(run_page.header(running))[ids.RUN_RESUME] == {"display": "none"}


def test_the_resume_button_resumes_the_run(run_page, monkeypatch):
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url.path}")
        return httpx.Response(202, json={"id": "r1", "from_step": 40, "status": "queued"})

    client = ApiClient("http://api.test")
    client._http = httpx.Client(base_url="http://api.test", transport=httpx.MockTransport(handler))
    monkeypatch.setattr(data, "api", lambda token=None: client)
    assert run_page.on_resume(1, "r1", None) == "Resuming from its checkpoint of step 40…"
    assert asked == ["POST /api/runs/r1/resume"]


def test_the_lost_message_names_resume_and_resubmit():
    from backend.reaper import LOST_MESSAGE

    assert "Resume the run" in LOST_MESSAGE and "resubmit" in LOST_MESSAGE


def test_the_labs_queue_message_follows_the_run():
    message = "Queued run abc: position 2 in the queue, about 4 min."
    moved = [{"id": "abc", "status": "queued", "queue_position": 1, "queue_wait_s": 30}]
    assert on_queue_message({}, moved, message) == (
        "Queued run abc: position 1 in the queue, about under a minute.",
        "message queued",
    )
    assert on_queue_message({"abc": "running"}, moved, message) == ("Run abc started.", "message ok")
    ended = [{"id": "abc", "status": "completed"}]
    assert on_queue_message({}, ended, message) == ("Run abc completed.", "message ok")
    # another message (an error, a started run) is not this callback's
    assert on_queue_message({"abc": "running"}, moved, "Started run abc.") == (no_update, no_update)
