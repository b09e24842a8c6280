"""A shared lab server with tokens and private reading, driven in a real browser: paste a token once,
see who you are, start a run from the Lab page and watch its points stream (EventSource with ?token=)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

pytestmark = pytest.mark.browser

POINTS_JS = """() => { const g = document.querySelector('#nl-curves .js-plotly-plot');
  if (!g || !g.data) return -1; return g.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0); }"""
# the page reloads once when a token is saved: the box may be absent for a moment
SIGNED_IN = "() => ((document.querySelector('#auth-whoami') || {}).innerText || '').includes('ada')"


@pytest.fixture(scope="module")
def private_lab(browser, tmp_path_factory):
    from benchmarks.service import running_lab

    data_dir = tmp_path_factory.mktemp("private-lab")
    with running_lab(data_dir, workers=1, auth="tokens", public_read="false") as lab:
        made = subprocess.run(
            [sys.executable, "-m", "normlab", "token", "create", "--user", "ada"],
            env=lab.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        token = next(w for w in made.stdout.split() if w.startswith("nl_"))
        lab.url = lab.url.rstrip("/")
        lab.token = token
        yield lab


def test_token_pasted_once_signs_in_submits_and_streams(page, shot, private_lab):
    lab = private_lab
    assert httpx.get(lab.url + "/api/runs", timeout=10).status_code == 401  # reading is private
    page.goto(lab.url + "/")
    who = page.locator("#auth-whoami")
    page.locator("#auth-token-input").fill(lab.token)
    page.get_by_role("button", name="Use token").click()
    page.wait_for_function(SIGNED_IN, timeout=15000)
    assert "Signed in as ada" in who.inner_text()
    steps = page.locator('[id*="lab-field"][id*="steps"]')
    steps.fill("300")
    steps.press("Tab")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_selector(".run-chip", timeout=15000)
    page.wait_for_function(f"() => ({POINTS_JS})() > 5", timeout=30000)
    runs = httpx.get(
        lab.url + "/api/runs", headers={"Authorization": f"Bearer {lab.token}"}, timeout=10
    ).json()["items"]
    assert runs and runs[0]["owner"] == "ada"
    # the token is kept in the browser: a new page load is still signed in
    page.reload()
    page.wait_for_function(SIGNED_IN, timeout=15000)
    shot(page, "auth-signed-in")
    for r in runs:
        httpx.post(
            f"{lab.url}/api/runs/{r['id']}/cancel",
            headers={"Authorization": f"Bearer {lab.token}"},
            timeout=10,
        )
    assert not [e for e in page.errors if "401" not in e], page.errors
