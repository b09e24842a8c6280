"""The front end's token box: what it shows for each answer of GET /api/me (against the real API)."""

from __future__ import annotations

import dash

from frontend.auth_box import TOKEN_STORE, auth_box, auth_headers, describe, register, whoami


def test_token_box_says_who_the_token_is(make_client, tokens):
    off = make_client()
    me, err = whoami("", None, http=off)
    assert err is None and describe(me) == "This server needs no token."
    on = make_client(auth="tokens", public_read=False)
    alice, root = tokens("alice"), tokens("root", admin=True)
    token = alice["Authorization"].split()[1]
    assert describe(*whoami("", token, http=on)) == "Signed in as alice."
    assert describe(*whoami("", root["Authorization"].split()[1], http=on)) == "Signed in as root (admin)."
    anonymous = describe(*whoami("", None, http=on))
    assert anonymous.startswith("Not signed in") and "Reading this server needs one too." in anonymous
    assert "unknown or revoked" in describe(*whoami("", "nl_wrong", http=on))
    assert auth_headers(None) == {} and auth_headers(token) == alice


def test_token_box_mounts_on_a_dash_app():
    app = dash.Dash(__name__)
    app.layout = auth_box()
    register(app)
    assert any(TOKEN_STORE in key for key in app.callback_map)
    store = app.layout.children[0]
    assert store.id == TOKEN_STORE and store.storage_type == "local"  # kept in the browser
