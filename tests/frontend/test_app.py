"""The app object and the API client, without a browser."""

from __future__ import annotations

import dash
import httpx
import pytest

from frontend.api_client import ApiClient, ApiError
from frontend.app import create_app


def test_create_app_registers_every_page_and_can_be_built_twice():
    a, b = create_app(""), create_app("http://api.example:8000/")
    paths = {p.get("path_template") or p["path"] for p in dash.page_registry.values()}
    assert {"/", "/runs", "/compare", "/run/<run_id>", "/invariance", "/presets"} <= paths
    assert b.server.config["NORMLAB_API_BASE"] == "http://api.example:8000"
    for app in (a, b):
        outputs = " ".join(app.callback_map)
        assert "nl-curves-sink.children" in outputs and "nl-live-status.data" in outputs
    html = a.server.test_client().get("/").get_data(as_text=True)
    assert "normlab" in html and "_dash-config" in html


def _client(handler) -> ApiClient:
    c = ApiClient("http://api.test")
    c._http = httpx.Client(base_url="http://api.test", transport=httpx.MockTransport(handler))
    return c


def test_api_errors_carry_the_message_and_field_messages():
    def handler(request):
        return httpx.Response(422, json={"detail": "batch_size: BatchNorm needs batch size ≥ 2",
                                         "fields": {"batch_size": "BatchNorm needs batch size ≥ 2"}})
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
