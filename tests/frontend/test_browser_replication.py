"""A preset card's "replicate on fresh seeds" in a real headless Chromium on the synthetic API: the click
launches a fresh draw (seeds ≥ 10000) that never replaces the card's own verdict, and each claim then
shows its declared-seed verdict beside the fresh draw's and the record."""

from __future__ import annotations

import re
import time

import httpx
import pytest

pytestmark = pytest.mark.browser


def test_replicate_on_fresh_seeds_shows_the_draw_beside_the_declared_verdict(page, shot, dev_server):
    dev_server.api.rate = 400.0  # the synthetic runs finish in about a second
    try:
        gid = httpx.post(f"{dev_server.url}/api/presets/online", json={}, timeout=10).json()["group_id"]
        deadline = time.time() + 30
        while not httpx.get(f"{dev_server.url}/api/groups/{gid}", timeout=10).json()["done"]:
            assert time.time() < deadline, "the preset's runs did not end"
            time.sleep(0.2)
        page.goto(f"{dev_server.url}/presets")
        card = page.locator(".preset.card").filter(has=page.locator(f"a[href='/compare?group={gid}']"))
        record = card.locator(".replication")
        record.get_by_text("no fresh draw yet").first.wait_for(timeout=20000)
        card.get_by_role("button", name="Replicate on 5 fresh seeds").click()
        record.get_by_text(re.compile(r"held on 1 of 1 judged fresh draw")).first.wait_for(timeout=30000)
        text = record.inner_text()
        assert re.search(r"latest fresh draw \(seeds (\d{5,}, ){4}\d{5,}\)", text), text
        assert "seeds 0,1,2,3,4:" in text
        # the card's own verdict is still the declared-seed launch
        assert card.locator(f"a[href='/compare?group={gid}']").count() == 1
        assert not page.errors, page.errors
        shot(page, "preset-replication")
    finally:
        dev_server.api.rate = 25.0
