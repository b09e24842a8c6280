"""Embed and replay pages in a real headless Chromium against `normlab up`: framed by another origin,
drawing live points, loading nothing from elsewhere; two finished runs replayed on one clock."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from normlab_client import Client

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quiet_queue")]
LOSS_POINTS = (
    "() => { const d = document.getElementById('panel-loss'); return d && d.data ? d.data[0].x.length : -1; }"
)


class HostPage:
    """A page on another origin (its own port) whose whole content is `html`."""

    def __init__(self, html: str):
        body = html.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802  (the stdlib's name)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def _frame(page, part: str):
    page.wait_for_function("() => !!document.querySelector('iframe')", timeout=10000)
    for _ in range(200):
        for f in page.frames:
            if part in f.url:
                return f
        page.wait_for_timeout(50)
    raise AssertionError(f"no frame at {part}")


def test_embed_in_an_iframe_on_another_origin_draws_live_points(page, server, shot):
    lab = Client(server.url)
    run = lab.submit(task="digits", steps=20_000, hidden_size=16, eval_every=500)
    src = f"{server.url}/embed/run/{run.id}?panels=loss,val&smoothing=0.6&controls=0&big=1"
    host = HostPage(f'<h1>A talk</h1><iframe src="{src}" width="900" height="420"></iframe>')
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(host.url)
        frame = _frame(page, f"/embed/run/{run.id}")
        frame.wait_for_function("() => window.normlabEmbed && window.normlabEmbed.ready", timeout=30000)
        first = frame.evaluate(LOSS_POINTS)
        frame.wait_for_function(f"() => ({LOSS_POINTS})() > {max(first, 0) + 10}", timeout=60000)
        assert frame.evaluate(f"() => window.normlabEmbed.live['{run.id}']") > 0  # from the stream
        assert frame.evaluate("() => document.querySelectorAll('.modebar-container .modebar').length") == 0
        shot(page, "embed_iframe_other_origin")
    finally:
        host.close()
        run.cancel()
    lab_origin, host_origin = server.url.rstrip("/"), host.url.rstrip("/")
    elsewhere = [u for u in requests if not (u.startswith(lab_origin) or u.startswith(host_origin))]
    assert elsewhere == []  # every asset from the normlab server itself
    assert page.errors == []
    # only the embed pages may be framed by another origin
    embed = httpx.get(src, timeout=10)
    assert embed.headers["content-security-policy"] == "frame-ancestors *"
    assert "x-frame-options" not in embed.headers
    dashboard = httpx.get(f"{server.url}/run/{run.id}", timeout=10)
    assert dashboard.headers["x-frame-options"] == "SAMEORIGIN"
    assert dashboard.headers["content-security-policy"] == "frame-ancestors 'self'"


def _expected_counts(server, run_ids: list[str], t: float) -> dict[str, int]:
    """Points of each run's training-loss curve logged within t seconds of the run's first point: the
    replay's one clock, computed from the API's series (not from the page)."""
    out = {}
    for rid in run_ids:
        series = httpx.get(f"{server.url}/api/runs/{rid}/metrics", params={"max_points": 2000}).json()[
            "series"
        ]
        firsts = [
            s["time"][i]
            for name in ("train_loss", "val_loss", "accuracy")
            for s in [series[name]]
            for i, v in enumerate(s["value"])
            if v is not None
        ]
        t0 = min(firsts)
        loss = series["train_loss"]
        out[rid] = sum(
            1 for tt, v in zip(loss["time"], loss["value"], strict=True) if v is not None and tt - t0 <= t
        )
    return out


def test_replay_plays_two_runs_on_one_clock_and_scrubbing_moves_both(page, server, shot):
    lab = Client(server.url)
    group = lab.sweep(task="digits", steps=400, hidden_size=16, eval_every=50, norms=["layer", "none"])
    group.wait(progress=False, timeout=180)
    ids = group.run_ids
    page.goto(f"{server.url}/embed/replay?runs={','.join(ids)}&speed=4")
    page.wait_for_function("() => window.normlabEmbed && window.normlabEmbed.ready", timeout=30000)
    page.wait_for_function("() => window.normlabEmbed.t > 0", timeout=10000)  # it plays by itself
    state = page.evaluate("() => ({t: normlabEmbed.t, shown: normlabEmbed.shown, T: normlabEmbed.T})")
    assert state["shown"] == _expected_counts(server, ids, state["t"])  # both runs on the one clock
    page.click("#nl-play")  # pause
    scrub = page.locator("#nl-scrub")
    seen = []
    for value in (250, 750, 1000):
        scrub.evaluate(f"(el) => {{ el.value = '{value}'; el.dispatchEvent(new Event('input')); }}")
        state = page.evaluate("() => ({t: normlabEmbed.t, shown: normlabEmbed.shown, T: normlabEmbed.T})")
        assert state["t"] == pytest.approx(value / 1000 * state["T"])
        assert state["shown"] == _expected_counts(server, ids, state["t"])
        seen.append(state["shown"])
    for rid in ids:  # scrubbing forward moved both runs' curves forward, to their ends
        assert seen[0][rid] < seen[1][rid] <= seen[2][rid]
    totals = _expected_counts(server, ids, 1e9)
    assert seen[2] == totals
    # link by step: hovering the loss chart marks the same step on the validation chart
    box = page.locator("#panel-loss .nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    page.wait_for_function("() => window.normlabEmbed.hoverStep !== null", timeout=10000)
    marks = page.evaluate(
        "() => [normlabEmbed.hoverStep, document.getElementById('panel-val').layout.shapes[0].x0]"
    )
    assert marks[0] == marks[1]
    shot(page, "embed_replay")
    assert page.errors == []


def test_embed_button_copies_an_iframe_of_the_page_runs(page, server):
    lab = Client(server.url)
    run = lab.submit(task="digits", steps=20, hidden_size=16, eval_every=10)
    page.goto(f"{server.url}/run/{run.id}")
    page.get_by_role("button", name="Embed").click()
    page.wait_for_function("() => !!window.normlabLastEmbed", timeout=10000)
    code = page.evaluate("() => window.normlabLastEmbed")
    assert code.startswith('<iframe src="') and code.endswith("</iframe>")
    src = urlsplit(code.split('"')[1])
    assert f"{src.scheme}://{src.netloc}" == server.url.rstrip("/")
    assert src.path == f"/embed/run/{run.id}"
    # the embed keeps the page's smoothing (when the page's URL has one)
    assert parse_qs(src.query).get("smoothing") == parse_qs(urlsplit(page.url).query).get("smooth")
