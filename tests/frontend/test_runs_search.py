"""The Runs page's search: its filters become GET /api/runs parameters, and rows show names and tags."""

from __future__ import annotations

import httpx
import pytest

from frontend import logic
from frontend.app import create_app


def test_search_filters_reach_the_api_query_and_rows_show_names_and_tags():
    create_app()  # Dash imports the pages (register_page needs an app first)
    from frontend.pages.runs import COLUMNS, FILTERS

    fields = [name for name, _label, _options in FILTERS]
    assert {"q", "tag", "created_after"} <= set(fields)
    query = logic.runs_query({"q": "baseline", "tag": "paper", "created_after": "2026-05-28", "owner": ""})
    assert query == {"q": "baseline", "tag": "paper", "created_after": "2026-05-28", "limit": 200}
    run = {"id": "r1", "status": "completed", "spec": {}, "name": "LN baseline", "tags": ["fig6", "paper"]}
    (row,) = logic.run_rows([run])
    assert (row["name"], row["tags"]) == ("LN baseline", "fig6, paper")
    assert {"name", "tags"} <= {c for c, _ in COLUMNS}


@pytest.mark.browser
@pytest.mark.usefixtures("quiet_queue")
def test_typing_in_the_runs_search_keeps_only_matching_runs(page, server):
    made = []
    for steps in (5, 6):
        r = httpx.post(server.url + "/api/runs", json={"task": "digits", "steps": steps}, timeout=10)
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
    r = httpx.patch(
        f"{server.url}/api/runs/{made[1]}", json={"name": "needle run", "tags": ["hay"]}, timeout=10
    )
    assert r.status_code == 200, r.text
    page.goto(server.url + "/runs")
    page.wait_for_selector(f"#runs-table >> text={made[0]}", timeout=15000)
    search = page.locator('[id*="runs-filter"][id*="\\"q\\""]')
    search.fill("NEEDLE")
    search.press("Enter")
    page.wait_for_function(
        f"() => !document.querySelector('#runs-table').innerText.includes('{made[0]}')", timeout=15000
    )
    text = page.locator("#runs-table").inner_text()
    assert made[1] in text and "needle run" in text and "hay" in text
