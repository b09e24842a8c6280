"""The Run page's init-gradient card in Chromium against `normlab up` with its real engine: a short
pre-LN and a short post-LN `reverse` run each draw one bar per Transformer block, and the bars are the
per-block gradient norms the API serves for that run (its raw events, GET /api/runs/{id}/export)."""

from __future__ import annotations

import time

import httpx
import pytest

from normlab_client.events import TERMINAL_STATUSES

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.usefixtures("quiet_queue")]

BARS_JS = """() => { const g = document.querySelector('#run-init-grads .js-plotly-plot');
  const t = g && g.data && g.data[0];
  return t && t.type === 'bar' ? {x: Array.from(t.x), y: Array.from(t.y)} : null; }"""


def _start(server, ln_position: str) -> str:
    body = {"task": "reverse", "ln_position": ln_position, "steps": 30, "eval_every": 30}
    r = httpx.post(server.url + "/api/runs", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _wait_ended(server, rid: str, seconds: float = 90) -> dict:
    deadline = time.time() + seconds
    while True:
        run = httpx.get(f"{server.url}/api/runs/{rid}", timeout=10).json()
        if run["status"] in TERMINAL_STATUSES:
            return run
        assert time.time() < deadline, f"run {rid} did not end: {run['status']}"
        time.sleep(0.3)


def _served_norms(server, rid: str) -> list[float]:
    """The per-block gradient norms of the run's log events, as the API serves its raw history."""
    r = httpx.get(f"{server.url}/api/runs/{rid}/export", params={"format": "json"}, timeout=30)
    assert r.status_code == 200, r.text
    found = [
        e["payload"]["layer_grad_norms"]
        for e in r.json()["events"]
        if e["kind"] == "log" and "layer_grad_norms" in (e.get("payload") or {})
    ]
    assert len(found) == 1, f"expected one log event with the init gradients, got {len(found)}"
    return found[0]


def test_pre_and_post_ln_runs_draw_the_served_gradient_norms_one_bar_per_block(page, shot, server):
    rids = {pos: _start(server, pos) for pos in ("pre", "post")}
    served: dict[str, list[float]] = {}
    for pos, rid in rids.items():
        run = _wait_ended(server, rid)
        assert run["status"] == "completed", run.get("error")
        assert run["spec"]["ln_position"] == pos
        layers = run["spec"]["layers"]
        served[pos] = _served_norms(server, rid)
        assert len(served[pos]) == layers and all(v > 0 for v in served[pos])

        page.goto(f"{server.url}/run/{rid}")
        card = page.locator(".card").filter(has=page.locator("#run-init-grads"))
        card.wait_for(state="visible", timeout=20000)
        assert f"{pos}-LN" in card.inner_text()
        bars = page.wait_for_function(BARS_JS, timeout=30000).json_value()
        assert bars["x"] == [f"block {k + 1}" for k in range(layers)]
        assert bars["y"] == pytest.approx(served[pos], rel=1e-12)
        shot(page, f"run-init-gradients-{pos}")
        assert not page.errors, page.errors

    # the two runs differ only in ln_position (same seed, same data): the two cards draw different
    # profiles, and the help text's statement (post-LN: the output-side blocks take larger gradients
    # relative to the first than with pre-LN) holds for the numbers served
    assert served["pre"] != served["post"]
    ratio = {pos: v[-1] / v[0] for pos, v in served.items()}
    assert ratio["post"] > ratio["pre"], ratio
