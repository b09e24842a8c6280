"""The app object and the API client, without a browser."""

from __future__ import annotations

import subprocess
import sys

import dash
import httpx
import pytest

from frontend.api_client import ApiClient, ApiError
from frontend.app import PLOTLY, create_app, preload_links
from normlab.settings import Settings


def test_create_app_registers_every_page_and_can_be_built_twice():
    a = create_app(Settings(api_url=""))
    b = create_app(Settings(api_url="http://api.example:8000/"))
    paths = {p.get("path_template") or p["path"] for p in dash.page_registry.values()}
    assert {"/", "/runs", "/compare", "/run/<run_id>", "/invariance", "/presets"} <= paths
    assert b.server.config["NORMLAB_API_BASE"] == "http://api.example:8000"
    assert create_app(api_base="http://x:1").server.config["NORMLAB_API_BASE"] == "http://x:1"
    for app in (a, b):
        outputs = " ".join(app.callback_map)
        assert "nl-curves-sink.children" in outputs and "nl-live-status.data" in outputs
        # each app holds its pages' callbacks (Dash keeps dash.callback ones globally), once each
        assert "lab-message.children" in outputs and "inv-table.children" in outputs
        listed = [c["output"] for c in app._callback_list]
        assert len(listed) == len(set(listed)), "a callback registered twice"
    # every app gets every callback, also those of modules the pages share (imported once per process):
    # a second app without them drew cards whose records never loaded
    assert set(b.callback_map) == set(a.callback_map)
    assert sum("preset-replicat" in key for key in a.callback_map) == 3
    assert "nl-fork-sink.children" in a.callback_map and "run-labels-message.children" in a.callback_map
    html = a.server.test_client().get("/").get_data(as_text=True)
    assert "normlab" in html and "_dash-config" in html
    assert b.server.test_client().get("/_dash-dependencies").status_code == 200


def test_pages_with_a_graph_name_their_lazy_scripts_in_the_head_and_the_others_do_not():
    app = create_app(Settings(api_url=""))
    client = app.server.test_client()
    for path in ("/", "/compare", "/run/abc123"):
        html = client.get(path).get_data(as_text=True)
        assert f'<script defer src="/{PLOTLY}"></script>' in html, path  # the same URL dcc.Graph asks for
        assert 'rel="preload" as="script" href="/_dash-component-suites/dash/dcc/async-graph.js"' in html
        assert html.index(PLOTLY) < html.index("dash_renderer")  # in the head, before Dash's scripts
    for path in ("/runs", "/invariance", "/presets"):
        html = client.get(path).get_data(as_text=True)
        assert PLOTLY not in html and "async-graph" not in html, path
    # behind a path prefix (a lab server under /normlab/) the URLs carry the prefix
    assert f'src="/normlab/{PLOTLY}"' in preload_links("frontend.pages.compare", "/normlab/")
    assert preload_links("frontend.pages.runs", "/normlab/") == ""


def test_every_page_opens_with_its_outline_not_a_blank_loading_line():
    app = create_app(Settings(api_url=""))
    client = app.server.test_client()
    for path in ("/", "/compare", "/run/abc123", "/runs", "/presets", "/invariance"):
        html = client.get(path).get_data(as_text=True)
        entry = html[html.index('<div id="react-entry-point">') :]
        assert "nl-skeleton" in entry and "sk-card" in entry, path  # the renderer replaces it
        assert "Loading..." not in html, path


def _find(node, id_):
    if isinstance(node, dict):
        if node.get("props", {}).get("id") == id_:
            return node
        return next((f for v in node.values() if (f := _find(v, id_)) is not None), None)
    if isinstance(node, list):
        return next((f for v in node if (f := _find(v, id_)) is not None), None)
    return None


def test_the_layout_carries_the_page_its_referer_opens_so_the_router_need_not_run():
    client = create_app(Settings(api_url="http://127.0.0.1:9")).server.test_client()  # no API there
    layout = client.get(
        "/_dash-layout", headers={"Referer": "http://localhost/runs?sort=val_loss"}
    ).get_json()
    location, content = _find(layout, "_pages_location"), _find(layout, "_pages_content")
    # every part as window.location will hold it: the location has nothing to report on mounting
    assert location["props"] | {"refresh": None} == {
        "id": "_pages_location",
        "refresh": None,
        "pathname": "/runs",
        "search": "?sort=val_loss",
        "hash": "",
        "href": "http://localhost/runs?sort=val_loss",
    }
    assert content["props"]["children"]  # the Runs page (here: its message that the API is unreachable)
    assert _find(layout, "_pages_store")["props"]["data"] == {
        "title": dash.page_registry["frontend.pages.runs"]["title"]
    }
    assert "<title>normlab · Runs</title>" in client.get("/runs").get_data(as_text=True)
    # no Referer, another host's, or no such page: the stock empty container, and the router renders
    for headers in ({}, {"Referer": "http://elsewhere.example/runs"}, {"Referer": "http://localhost/nope"}):
        layout = client.get("/_dash-layout", headers=headers).get_json()
        assert _find(layout, "_pages_content")["props"].get("children") is None, headers
        assert "pathname" not in _find(layout, "_pages_location")["props"], headers


def test_nav_comes_from_the_page_registry_in_page_order():
    app = create_app()
    nav = app.layout().children[4].children[2]  # the top bar's <nav>
    assert [(link.children, link.href) for link in nav.children] == [
        ("Lab", "/"),
        ("Runs", "/runs"),
        ("Compare", "/compare"),
        ("Presets", "/presets"),
        ("Invariance", "/invariance"),
    ]  # a run's page (nav=False) is reached from the others


def test_page_callbacks_are_module_functions_tests_can_call():
    create_app()  # Dash imports the pages (register_page needs an app first)
    # dash.callback hands back the function itself: a page's callback is called like any function
    from frontend.pages import lab, runs

    assert lab.on_sweep_toggle(["on"]) == ({}, {"display": "none"}, "Start sweep")
    assert lab.on_sweep_toggle([])[2] == "Start run"
    rows = [{"id": "a1"}, {"id": "b2"}]
    assert runs.compare_href([1, 0], rows) == "/compare?runs=b2,a1"


def _client(handler) -> ApiClient:
    c = ApiClient("http://api.test")
    c._http = httpx.Client(base_url="http://api.test", transport=httpx.MockTransport(handler))
    return c


def test_api_errors_carry_the_message_and_field_messages():
    def handler(request):
        return httpx.Response(
            422,
            json={
                "detail": "batch_size: BatchNorm needs batch size ≥ 2",
                "fields": {"batch_size": "BatchNorm needs batch size ≥ 2"},
            },
        )

    with pytest.raises(ApiError) as err:
        _client(handler).create_run({"task": "digits", "norm": "batch", "batch_size": 1})
    assert err.value.status == 422 and err.value.fields == {"batch_size": "BatchNorm needs batch size ≥ 2"}


def test_fastapi_default_422_list_and_no_answer_become_readable():
    def handler(request):
        return httpx.Response(422, json={"detail": [{"loc": ["query", "max_points"], "msg": "too small"}]})

    with pytest.raises(ApiError, match="max_points: too small"):
        _client(handler).metrics("r1", ["train_loss"], 1)

    def down(request):
        raise httpx.ConnectError("refused")

    with pytest.raises(ApiError, match="is `normlab up` running") as err:
        _client(down).catalog()
    assert err.value.status == 0


def test_presets_accept_a_list_or_an_object():
    assert _client(lambda r: httpx.Response(200, json=[{"name": "a"}])).presets() == [{"name": "a"}]
    wrapped = _client(lambda r: httpx.Response(200, json={"presets": [{"name": "b"}]}))
    assert wrapped.presets() == [{"name": "b"}]


def test_same_origin_client_talks_to_the_listening_socket_not_the_host_header():
    import flask

    from frontend.api_client import api_for

    app = flask.Flask("t")
    # the socket is 0.0.0.0:8050; the Host header is the public name a reverse proxy forwards
    with app.test_request_context("/", base_url="http://0.0.0.0:8050", headers={"Host": "lab.example.org"}):
        assert flask.request.host == "lab.example.org"
        assert api_for("").base == "http://127.0.0.1:8050"
    assert api_for("http://api:8000/").base == "http://api:8000"


def test_front_end_never_imports_torch_backend_or_workers():
    # beside tests/backend/test_api.py::test_api_never_imports_torch: the front end talks HTTP only
    code = (
        "import sys; from frontend.app import create_app; create_app().server.test_client().get('/');"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'backend', 'workers'));"
        "assert not bad, f'imported: {bad}'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
