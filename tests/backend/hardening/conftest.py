"""Fixtures for the hardening tests: in-process APIs with auth on (SQLite in tmp_path), tokens, and
a TCP proxy that can take a database away and give it back."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.auth import TokenStore
from normlab.settings import Settings

TINY = {"task": "digits", "steps": 30, "hidden_size": 16, "eval_every": 10}


@pytest.fixture
def make_client(tmp_path):
    """A factory: TestClient over create_app(Settings(data_dir=tmp_path, **overrides))."""
    made = []

    def make(**overrides) -> TestClient:
        settings = Settings(data_dir=tmp_path, queue=f"nlh{len(made)}", **overrides)
        client = TestClient(create_app(settings))
        client.__enter__()
        made.append(client)
        return client

    yield make
    for c in made:
        c.__exit__(None, None, None)


@pytest.fixture
def tokens(tmp_path):
    """Create tokens in the same store: tokens("alice") -> headers dict."""
    from backend.store import get_store

    store = TokenStore(get_store(Settings(data_dir=tmp_path)))

    def make(user: str, admin: bool = False) -> dict[str, str]:
        _id, token = store.create(user, admin=admin)
        return {"Authorization": f"Bearer {token}"}

    make.store = store
    return make
