"""`Http`: one server's HTTP session, shared by a Client and the Runs and Groups it hands out; every
refusal becomes a NormlabError carrying the server's message."""

from __future__ import annotations

from typing import Any

import httpx

from normlab_client.errors import NormlabError, from_response


class Http:
    def __init__(
        self, base_url: str, token: str | None, timeout: float, transport: httpx.BaseTransport | None = None
    ):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The answer of a 2xx request; a NormlabError with the server's message for anything else."""
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise NormlabError(f"Could not reach the normlab server at {self.base_url} ({exc}).") from exc
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = None
            raise from_response(resp.status_code, body, resp.text[:300])
        return resp

    def stream(
        self, path: str, headers: dict[str, str], params: dict[str, str | int] | None = None
    ) -> httpx.Response:
        """A streaming GET (the caller closes it); the read timeout outlasts the server's heartbeats."""
        req = self._http.build_request("GET", path, headers=headers, params=params)
        timeout = httpx.Timeout(self._http.timeout.connect or 30.0, read=60.0)
        req.extensions["timeout"] = timeout.as_dict()
        return self._http.send(req, stream=True)

    def close(self) -> None:
        self._http.close()
