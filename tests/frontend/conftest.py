"""Fixtures for the front-end tests: a served dashboard (synthetic API, or the real `normlab up`-style
app when it exists) and a headless Chromium page. Browser tests skip cleanly without /usr/bin/chromium."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from normlab import headless
from normlab.headless import CHROMIUM_ARGS
from normlab.table1 import PAPER_TABLE1, TRANSFORMS, Table1
from normlab_client.events import ACTIVE_STATUSES

CHROMIUM = os.environ.get("NORMLAB_TEST_CHROMIUM", headless.CHROMIUM)  # a missing path: browser tests skip
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A uvicorn server in a thread (same process: the tests can reach its state)."""

    def __init__(self, app, port: int):
        import uvicorn

        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        import httpx

        self.thread.start()
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/api/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("test server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(5)


@pytest.fixture(scope="session")
def dev_server():
    """The dashboard over the synthetic API (benchmarks.devapi): fast, deterministic runs."""
    from benchmarks.devapi import DevAPI

    api = DevAPI(rate=25.0, invariance=None)
    with Served(api.app, free_port()) as served:
        served.api = api
        yield served


@pytest.fixture(scope="module")
def browser():
    """One Chromium per test module. Not per session: Playwright's sync API keeps an event loop running in
    the main thread while it is open, and under pytest-xdist a worker runs other modules' tests after a
    browser module (their `asyncio.run` would fail)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (browser tests skipped)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    """A fresh tab; console errors collected in page.errors; a screenshot saved when the test ends."""
    context = browser.new_context(viewport={"width": 1400, "height": 950})
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    yield pg
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        pg.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"), full_page=True)
    finally:
        context.close()


def _shot(pg, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def shot():
    """shot(page, name): save a full-page screenshot under artifacts/screenshots/."""
    return _shot


@pytest.fixture(scope="session")
def server(request, tmp_path_factory):
    """`normlab up` (embedded form: SQLite, one real worker) on a free port, as people run it.

    NORMLAB_FRONTEND_TEST_API=dev swaps in the synthetic API (no torch, no worker) for quick UI work.
    """
    if os.environ.get("NORMLAB_FRONTEND_TEST_API") == "dev":
        yield request.getfixturevalue("dev_server")
        return
    from benchmarks.service import running_lab  # an import error of our own code fails the tests, loudly

    with running_lab(tmp_path_factory.mktemp("lab"), workers=1) as lab:
        lab.url = lab.url.rstrip("/")
        yield lab


@pytest.fixture
def quiet_queue(browser, server):
    """Cancel whatever a test left queued or running, so the next test's run starts at once."""
    import httpx

    yield
    items = httpx.get(server.url + "/api/runs", params={"limit": 200}, timeout=10).json()["items"]
    for r in items:
        if r["status"] in ACTIVE_STATUSES:
            httpx.post(f"{server.url}/api/runs/{r['id']}/cancel", timeout=10)


def _table1(flip: tuple[str, str] | None = None, extra: bool = True):
    """A computed Table 1 that equals the printed one, except the cell `flip`; RMSNorm as an extra row."""
    methods = {m: dict(row) for m, row in PAPER_TABLE1.items()}
    if flip:
        methods[flip[0]][flip[1]] = not methods[flip[0]][flip[1]]
    if extra:
        methods["rms"] = dict.fromkeys(TRANSFORMS, False)
    diffs = {m: {t: (1e-16 if v else 3.0) for t, v in row.items()} for m, row in methods.items()}
    agrees = {m: {t: methods[m][t] == PAPER_TABLE1[m][t] for t in TRANSFORMS} for m in PAPER_TABLE1}
    return Table1.model_validate(
        {
            "methods": methods,
            "max_abs_diff": diffs,
            "tolerance": 1e-9,
            "paper_table1": PAPER_TABLE1,
            "agrees_with_paper_table": agrees,
            "all_paper_cells_agree": all(all(r.values()) for r in agrees.values()),
            "notes": ["the engine's note on the prose cell"],
            "setup": {
                "seed": 0,
                "units": 8,
                "inputs": 6,
                "cases": 16,
                "draws": 3,
                "dtype": "float64",
                "eps": 1e-300,
                "compared": "outputs",
                "weight_normalization_weights": "v",
            },
            "extra_methods": ["rms"] if extra else [],
        }
    )


@pytest.fixture
def make_table1():
    """make_table1(flip=(method, transform), extra=True): a Table 1 model to feed the pages."""
    return _table1
