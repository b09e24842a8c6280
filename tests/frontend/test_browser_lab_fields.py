"""The Lab form's task-specific fields in Chromium against `normlab up`: the Transformer task shows the
LayerNorm position and a "post" choice reaches the stored spec; a ConvNet task shows Weight
Standardization and a ticked box reaches the stored spec; a combination the API refuses (Weight
Standardization without a normalizer after the conv) is answered on the page and starts nothing."""

from __future__ import annotations

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.usefixtures("quiet_queue")]

CHIP_LINKS = "#lab-runs .run-chip a"


def _by_id(page, kind: str, name: str):
    """The element whose id is Dash's JSON of {"type": kind, "field": name} (keys sorted)."""
    return page.locator(f"""[id='{{"field":"{name}","type":"{kind}"}}']""")


def field(page, name: str):
    return _by_id(page, "lab-field", name)


def box(page, name: str):
    return _by_id(page, "lab-box", name)


def error_of(page, name: str):
    return _by_id(page, "lab-error", name)


def choose(page, dropdown, option: str) -> None:
    dropdown.click()
    page.get_by_role("option", name=option, exact=True).click()


def choose_task(page, task: str) -> None:
    """Pick a task and wait for its answer, which rewrites the form's values and shown fields."""
    before = page.locator("#lab-task-help").text_content()
    choose(page, page.locator("#lab-task"), task)
    page.wait_for_function(
        "(was) => document.querySelector('#lab-task-help').textContent !== was", arg=before
    )


def set_number(page, name: str, value: int) -> None:
    f = field(page, name)
    f.fill(str(value))
    f.press("Tab")


def chip_ids(page) -> list[str]:
    return [
        h.rsplit("/", 1)[-1] for h in page.locator(CHIP_LINKS).evaluate_all("els => els.map(e => e.href)")
    ]


def start_one_run(page, before: list[str]) -> str:
    """Press Start run; the id of the one new run on the board."""
    page.get_by_role("button", name="Start run").click()
    page.wait_for_function(
        "(n) => document.querySelectorAll('#lab-runs .run-chip a').length > n", arg=len(before), timeout=20000
    )
    (new,) = [r for r in chip_ids(page) if r not in before]
    return new


def stored_spec(server, rid: str) -> dict:
    return httpx.get(f"{server.url}/api/runs/{rid}", timeout=10).json()["spec"]


def count_runs(server) -> int:
    return httpx.get(server.url + "/api/runs", params={"limit": 1}, timeout=10).json()["total"]


def test_transformer_and_conv_tasks_show_their_fields_and_the_choices_reach_the_spec(page, shot, server):
    page.goto(server.url + "/")
    choose_task(page, "reverse")
    box(page, "ln_position").wait_for(state="visible", timeout=10000)
    assert box(page, "weight_standardization").is_hidden()
    choose(page, field(page, "ln_position"), "post")
    set_number(page, "steps", 20)
    rid = start_one_run(page, chip_ids(page))
    spec = stored_spec(server, rid)
    assert spec["task"] == "reverse" and spec["ln_position"] == "post" and spec["steps"] == 20
    assert spec["weight_standardization"] is False
    shot(page, "lab-ln-position-post")

    choose_task(page, "conv-digits")
    box(page, "weight_standardization").wait_for(state="visible", timeout=10000)
    assert box(page, "ln_position").is_hidden()
    assert page.locator("#lab-norm").inner_text().strip() == "layer"  # reverse's norm, kept: conv has it
    field(page, "weight_standardization").get_by_text("standardize each conv filter").click()
    set_number(page, "steps", 20)
    rid2 = start_one_run(page, chip_ids(page))
    spec = stored_spec(server, rid2)
    assert spec["task"] == "conv-digits" and spec["weight_standardization"] is True
    assert spec["ln_position"] == "pre"  # the Transformer's field, hidden here, is not carried over
    shot(page, "lab-weight-standardization")
    assert not page.errors, page.errors


def test_weight_standardization_without_a_normalizer_is_refused_on_the_page(page, shot, server):
    page.goto(server.url + "/")
    choose_task(page, "conv-digits")
    choose(page, page.locator("#lab-norm"), "none")
    field(page, "weight_standardization").get_by_text("standardize each conv filter").click()
    before = count_runs(server)
    # what the API says of this spec, asked directly: the page must show that answer
    refused = httpx.post(
        server.url + "/api/runs",
        json={"task": "conv-digits", "norm": "none", "weight_standardization": True},
        timeout=10,
    )
    assert refused.status_code == 422, refused.text
    said = refused.json()["fields"]
    assert list(said) == ["weight_standardization"], said
    page.get_by_role("button", name="Start run").click()
    err = error_of(page, "weight_standardization")
    page.wait_for_function(
        "(el) => el.textContent.trim().length > 0", arg=err.element_handle(), timeout=10000
    )
    assert err.inner_text().strip() == said["weight_standardization"]
    message = page.locator("#lab-message").inner_text()
    assert message.startswith("Not started") and "Weight Standardization" in message
    body = page.locator("body").inner_text()
    assert "Traceback" not in body and "Internal Server Error" not in body
    assert count_runs(server) == before, "a refused spec created a run"
    assert not page.locator(CHIP_LINKS).count()
    shot(page, "lab-ws-refused")
