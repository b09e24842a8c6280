"""A shared lab's queue in a real headless Chromium against `normlab up` (one worker): a Lab click waits
behind nobody's batch work — it goes ahead of a preset queued before it — and the Lab says where it
stands in the queue instead of a green "Started"."""

from __future__ import annotations

import time

import httpx
import pytest

from benchmarks.devapi import DevAPI
from tests.frontend.test_browser_lab import field

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quiet_queue")]


def _status(server, rid: str) -> str:
    return httpx.get(f"{server.url}/api/runs/{rid}", timeout=10).json()["status"]


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_lab_click_goes_ahead_of_a_queued_preset_and_the_lab_shows_its_place(page, shot, server):
    if isinstance(getattr(server, "api", None), DevAPI):
        pytest.skip("the synthetic API has no queue: this needs `normlab up`")
    launched = httpx.post(
        f"{server.url}/api/presets/fig6-batch4", json={"seeds": [0, 1], "steps": 20000}, timeout=10
    ).json()
    preset = launched["run_ids"]
    # the one worker takes a preset run; the other three wait
    _wait(lambda: any(_status(server, r) == "running" for r in preset), 180, "no preset run started")
    busy = next(r for r in preset if _status(server, r) == "running")

    page.goto(server.url + "/")
    steps = field(page, "steps")
    steps.fill("30")
    steps.press("Tab")
    page.get_by_role("button", name="Start run").click()
    message = page.locator("#lab-message")
    message.get_by_text("position 1 in the queue").wait_for(timeout=20000)
    assert message.inner_text().startswith("Queued run ")
    chip = page.locator("#lab-runs .run-chip").last
    assert "position 1 in the queue" in chip.inner_text()
    shot(page, "talk-lab-queued")
    lab_run = message.inner_text().split()[2].rstrip(":")

    # the preset's running run ends: the worker takes the Lab's run next, not the preset's second
    httpx.post(f"{server.url}/api/runs/{busy}/cancel", timeout=10)
    _wait(lambda: _status(server, lab_run) != "queued", 180, "the Lab's run never left the queue")
    waiting = [r for r in preset if r != busy]
    assert all(_status(server, r) == "queued" for r in waiting), [_status(server, r) for r in waiting]
    # and the chip stops showing a place in the queue
    page.wait_for_function(
        "() => !document.querySelector('#lab-runs .run-chip:last-child .queue-note')", timeout=30000
    )
