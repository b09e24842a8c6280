"""The pages as `normlab up` serves them: compressed, and cached (fingerprinted bundles for a year,
/assets/ files revalidated by ETag)."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from normlab.cli.serve import app_with_pages
from normlab.settings import Settings


def test_page_assets_are_compressed_and_cacheable(tmp_path):
    client = TestClient(app_with_pages(Settings(data_dir=tmp_path)))
    gzip = {"accept-encoding": "gzip"}
    page = client.get("/", headers=gzip)
    assert page.status_code == 200 and page.headers["content-encoding"] == "gzip"
    scripts = re.findall(r'src="([^"]+\.js[^"]*)"', page.text)
    bundle = next(s for s in scripts if "dash_renderer" in s)
    with client.stream("GET", bundle, headers=gzip) as r:
        wire = sum(len(chunk) for chunk in r.iter_raw())
    assert r.headers["content-encoding"] == "gzip"
    assert wire < len(client.get(bundle).content) / 2
    assert "max-age=31536000" in r.headers["cache-control"]  # the URL carries the version
    asset = next(s for s in scripts if "/assets/normlab.js" in s)
    r = client.get(asset, headers=gzip)
    assert r.headers["content-encoding"] == "gzip" and r.headers.get("etag")
    again = client.get(asset, headers={**gzip, "if-none-match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


def test_without_accept_encoding_the_pages_come_plain(tmp_path):
    client = TestClient(app_with_pages(Settings(data_dir=tmp_path)))
    r = client.get("/", headers={"accept-encoding": "identity"})
    assert r.status_code == 200 and "content-encoding" not in r.headers
