"""The embed routes as served by the dashboard's Flask server: the page's configuration from the query,
errors for bad run lists, and which pages another origin may frame."""

from __future__ import annotations

import json
import re

import pytest

from frontend.app import create_app


@pytest.fixture(scope="module")
def flask_client():
    return create_app(api_base="").server.test_client()


def config_of(page: str) -> dict:
    m = re.search(r'<script id="nl-embed-config" type="application/json">(.*?)</script>', page, re.S)
    assert m, page[:300]
    return json.loads(m.group(1))


def test_compare_page_reads_its_view_from_the_query(flask_client):
    r = flask_client.get(
        "/embed/compare?runs=ab12,cd34,ab12&panels=loss,fisher,nope&smoothing=5&theme=dark&big=1&controls=0"
    )
    assert r.status_code == 200
    config = config_of(r.get_data(as_text=True))
    assert config["runs"] == ["ab12", "cd34"]  # each once, in order
    assert config["panels"] == ["loss", "fisher"]  # unknown panels dropped
    assert config["smoothing"] == 0.99  # clamped as the dashboard's slider is
    assert (config["theme"], config["big"], config["controls"], config["mode"]) == (
        "dark",
        True,
        False,
        "live",
    )
    assert r.headers["Content-Security-Policy"] == "frame-ancestors *"
    assert "X-Frame-Options" not in r.headers


def test_replay_defaults_and_local_assets_only(flask_client):
    r = flask_client.get("/embed/replay?runs=ab12,cd34&speed=4")
    page = r.get_data(as_text=True)
    config = config_of(page)
    assert (config["mode"], config["speed"], config["panels"]) == ("replay", 4.0, ["loss", "val", "metric"])
    assert config["smoothing"] == 0.6 and config["theme"] == "light" and config["controls"] is True
    assert config["smoothed_panels"] == ["loss"]  # validation curves drawn as measured
    sources = re.findall(r'src="([^"]+)"', page)
    assert sources and all(s.startswith("/") for s in sources)  # nothing from another server
    for src in sources:
        assert flask_client.get(src).status_code == 200


@pytest.mark.parametrize(
    "query",
    ["", "?runs=", "?runs=ab12,../etc", "?runs=" + ",".join(["a1"] * 3 + [f"r{i}" for i in range(13)])],
)
def test_bad_run_lists_are_refused_with_what_to_send(flask_client, query):
    r = flask_client.get("/embed/compare" + query)
    assert r.status_code == 422
    assert "runs must list 1 to 12 run ids" in r.get_data(as_text=True)


def test_only_embed_pages_may_be_framed_by_another_origin(flask_client):
    for path in ("/", "/runs", "/run/ab12"):
        r = flask_client.get(path)
        assert r.headers["X-Frame-Options"] == "SAMEORIGIN", path
        assert r.headers["Content-Security-Policy"] == "frame-ancestors 'self'", path
    assert flask_client.get("/embed/run/ab12").headers["Content-Security-Policy"] == "frame-ancestors *"


def test_presentation_mode_makes_an_embed_big_without_controls(flask_client):
    config = config_of(flask_client.get("/embed/replay?runs=ab12&present=1").get_data(as_text=True))
    assert config["big"] is True and config["controls"] is False
