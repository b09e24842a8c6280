"""A thin httpx client for the normlab HTTP API, used by the dashboard's server-side callbacks.

`api_for(base)` gives a client; with an empty base (the same-origin default of `normlab up`) it talks
to the host that served the current request. Errors come back as `ApiError` with the API's message and
per-field messages, ready to show next to the form fields.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import ValidationError

from normlab_client.group_models import GroupPublic, problems


class ApiError(Exception):
    """A non-2xx answer (or no answer): status, the API's message, and its per-field messages."""

    def __init__(self, status: int, detail: str, fields: dict[str, str] | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.fields = fields or {}


def attempt(call: Callable[[], object], done: str) -> str:
    """One action's message for a page: `done` when the API call succeeded, else the API's refusal as
    it words it (not the owner, a bad value: what to change)."""
    try:
        call()
    except ApiError as exc:
        return exc.detail
    return done


class ApiClient:
    def __init__(self, base: str, timeout: float = 10.0):
        self.base = base.rstrip("/")
        self._http = httpx.Client(base_url=self.base, timeout=timeout)
        self.token: str | None = None

    def with_token(self, token: str | None) -> ApiClient:
        """The same client acting for the browser's user (the token from the Lab's token box)."""
        other = copy.copy(self)
        other.token = token or None
        return other

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        if self.token:
            kw["headers"] = {**kw.get("headers", {}), "Authorization": f"Bearer {self.token}"}
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ApiError(
                0,
                f"The API at {self.base} did not answer ({exc.__class__.__name__}): is `normlab up` running?",
            ) from exc
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = {"detail": r.text[:300] or r.reason_phrase}
            detail = body.get("detail") if isinstance(body, dict) else body
            if not isinstance(detail, str):  # FastAPI's default 422 list, if a route bypasses ours
                detail = (
                    "; ".join(
                        f"{'.'.join(str(x) for x in d.get('loc', [])[1:])}: {d.get('msg')}" for d in detail
                    )
                    if isinstance(detail, list)
                    else str(detail)
                )
            fields = body.get("fields", {}) if isinstance(body, dict) else {}
            raise ApiError(r.status_code, detail, fields)
        if r.status_code == 204 or not r.content:
            return None
        try:
            return r.json()
        except ValueError as exc:  # not the API answering (an older server's pages catch-all): say so
            raise ApiError(404, f"{path} is not an API route on the server at {self.base}.") from exc

    def _object(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """An answer that is a JSON object (every route but cancel, delete and invariance)."""
        body = self._call(method, path, **kw)
        if not isinstance(body, dict):
            raise ApiError(502, f"{path} on the server at {self.base} answered no JSON object.")
        return body

    def catalog(self) -> dict[str, Any]:
        return self._object("GET", "/api/catalog")

    def presets(self) -> list[dict[str, Any]]:
        data = self._call("GET", "/api/presets")
        items = data.get("presets", data.get("items", [])) if isinstance(data, dict) else data
        return list(items or [])

    def runs(self, **query: str | int) -> dict[str, Any]:
        return self._object("GET", "/api/runs", params=query)

    def run(self, run_id: str) -> dict[str, Any]:
        return self._object("GET", f"/api/runs/{run_id}")

    def metrics(self, run_id: str, names: list[str] | None = None, max_points: int = 1000) -> dict[str, Any]:
        params: dict[str, Any] = {"max_points": max_points}
        if names:
            params["names"] = ",".join(names)
        return self._object("GET", f"/api/runs/{run_id}/metrics", params=params)

    def create_run(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self._object("POST", "/api/runs", json=spec)

    def create_sweep(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._object("POST", "/api/sweeps", json=body)

    def launch_preset(
        self, name: str, seeds: list[int] | None = None, steps: int | None = None, fresh: int | None = None
    ) -> dict[str, Any]:
        """POST /api/presets/{name}: the preset over its seeds (or `fresh` seeds drawn by the server, a
        replication) as one group -> {group_id, run_ids}."""
        body = {k: v for k, v in (("seeds", seeds), ("steps", steps), ("fresh", fresh)) if v is not None}
        return self._object("POST", f"/api/presets/{name}", json=body)

    def replications(self, name: str) -> dict[str, Any]:
        """GET /api/presets/{name}/replications: per claim, the declared-seed and latest fresh verdicts."""
        return self._object("GET", f"/api/presets/{name}/replications")

    def group(self, group_id: str) -> GroupPublic:
        """GET /api/groups/{id}: the group's runs, arms (mean ± std, bands) and, for a preset, claims.
        An answer not of that shape (another server's) is an ApiError saying so."""
        body = self._call("GET", f"/api/groups/{group_id}")
        try:
            return GroupPublic.model_validate(body)
        except ValidationError as exc:
            raise ApiError(
                502,
                f"The server at {self.base} answered group {group_id} in another shape ({problems(exc)}).",
            ) from None

    def label(self, run_id: str, labels: dict[str, Any]) -> dict[str, Any]:
        """PATCH /api/runs/{id}: name, tags or note (its owner or an admin); the run as it is now."""
        return self._object("PATCH", f"/api/runs/{run_id}", json=labels)

    def cancel(self, run_id: str) -> Any:
        return self._call("POST", f"/api/runs/{run_id}/cancel")

    def resume(self, run_id: str) -> dict[str, Any]:
        """POST /api/runs/{id}/resume -> {id, from_step, status} (a lost run continues as itself)."""
        return self._object("POST", f"/api/runs/{run_id}/resume")

    def fork(self, run_id: str, step: int | str, changes: dict[str, Any]) -> dict[str, Any]:
        """POST /api/runs/{id}/fork -> {id, from_step}."""
        return self._object("POST", f"/api/runs/{run_id}/fork", json={"step": step, "changes": changes})

    def intervene(self, run_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self._object("POST", f"/api/runs/{run_id}/interventions", json=changes)

    def lineage(self, run_id: str) -> dict[str, Any]:
        """GET /api/runs/{id}/lineage -> {parent, children, siblings, family}."""
        return self._object("GET", f"/api/runs/{run_id}/lineage")

    def delete(self, run_id: str) -> Any:
        return self._call("DELETE", f"/api/runs/{run_id}")

    def invariance(self, timeout: float | None = None) -> Any:
        return self._call("GET", "/api/invariance", **({"timeout": timeout} if timeout else {}))


def _same_server() -> str:
    """The address this server listens on (from the WSGI environ, not the Host header: behind a
    reverse proxy the public name may not be reachable from here)."""
    import flask

    if not flask.has_request_context():
        return "http://127.0.0.1:8050"
    env = flask.request.environ
    host, port = env.get("SERVER_NAME") or "127.0.0.1", env.get("SERVER_PORT") or "80"
    if host in ("0.0.0.0", "::", "", "localhost"):
        host = "127.0.0.1"
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{port}"


_clients: dict[str, ApiClient] = {}
_lock = threading.Lock()


def api_for(base: str) -> ApiClient:
    """The client for `base`; an empty base means the origin that served the current Flask request."""
    if not base:
        base = _same_server()
    base = base.rstrip("/")
    with _lock:
        if base not in _clients:
            _clients[base] = ApiClient(base)
        return _clients[base]
