"""An OpenAPI document that describes the answers this server really gives, so a client generated from
it works: the error body (`ErrorDetail`) on every 4xx/5xx, 401 only when tokens are on (and the token
optional where reading is public), 429 where submissions are limited, 413 for bodies, 503 when the
database is away; and a 405 whose `Allow` header lists every method the path has."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend.auth import OPEN_PATHS
from normlab.settings import Settings

ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}
RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "string"}}
}
SSE_EVENT = {
    "type": "object",
    "properties": {  # one event of the stream: `data` is the Event JSON
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
SUBMITTING = {("post", "/api/runs"), ("post", "/api/sweeps"), ("post", "/api/runs/{run_id}/resubmit")}


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": ERROR}
    if headers:
        out["headers"] = headers
    return out


def honest_openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """The document (built once): FastAPI's, with the answers above added and its validation-error
    shape (which this server never sends) replaced by ErrorDetail."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes, description=app.description)
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    tokens = settings.auth == "tokens"
    if not tokens:
        doc.get("components", {}).pop("securitySchemes", None)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            responses = op.setdefault("responses", {})
            for param in op.get("parameters", []):  # a query or header value is never JSON null
                options = param.get("schema", {}).pop("anyOf", None)
                if options:
                    param["schema"].update(next(o for o in options if o.get("type") != "null"))
            stream = responses.get("200", {}).get("content", {})
            if "text/event-stream" in stream:
                stream.pop("application/json", None)
                stream["text/event-stream"]["schema"] = SSE_EVENT
            if (
                "422" in responses
                or any(p.get("in") in ("query", "path") for p in op.get("parameters", []))
                or "requestBody" in op
            ):
                responses["422"] = _error("The request is invalid; `fields` says what to change per field.")
            if "requestBody" in op:
                responses["400"] = _error("The body could not be read (not UTF-8 JSON).")
                responses["413"] = _error("The request body is larger than NORMLAB_MAX_BODY_BYTES.")
            if (method, path) in SUBMITTING:
                responses["429"] = _error(
                    "Too many runs queued or running, or submissions per minute.", RETRY_AFTER
                )
            responses["503"] = _error("The results database (or the task queue) is unavailable.", RETRY_AFTER)
            if not tokens:
                op.pop("security", None)
                continue
            writing = method not in ("get", "head", "options")
            if not writing and (settings.public_read or path in OPEN_PATHS):
                op["security"] = [{"HTTPBearer": []}, {}]  # a token is optional here
            responses["401"] = _error(
                "A token is missing, unknown or revoked.",
                {"WWW-Authenticate": {"schema": {"type": "string"}}},
            )
            if writing and "/{run_id}" in path:
                responses["403"] = _error("Only the run's owner or an admin may do this.")
    _server_limits(doc, settings)
    app.openapi_schema = doc
    return doc


def _server_limits(node: Any, settings: Settings) -> None:
    """Every `steps` in the document allows at most this server's NORMLAB_MAX_STEPS (the models' own
    bound is the largest any server may set): a request within the document is never refused for it."""
    if isinstance(node, dict):
        steps = node.get("properties", {}).get("steps")
        for option in (steps or {}).get("anyOf", [steps] if steps else []):
            if "maximum" in option:
                option["maximum"] = min(option["maximum"], settings.max_steps)
        for value in node.values():
            _server_limits(value, settings)
    elif isinstance(node, list):
        for value in node:
            _server_limits(value, settings)


def no_repeated_query(request: Request) -> None:
    """Every query parameter of this API takes one value (lists are comma-separated): `?a=1&a=2` is
    refused instead of silently taking the last."""
    keys = [k for k, _ in request.query_params.multi_items()]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise HTTPException(
            422,
            {
                "detail": f"Give {', '.join(repeated)} once (lists are comma-separated).",
                "fields": {k: "given more than once" for k in repeated},
            },
        )


def install(app: FastAPI, settings: Settings) -> None:
    app.openapi = lambda: honest_openapi(app, settings)  # type: ignore[method-assign]

    @app.exception_handler(405)
    async def _method_not_allowed(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        allowed = sorted(
            {
                m
                for route in app.routes
                if isinstance(route, APIRoute) and route.path_regex.match(request.url.path)
                for m in route.methods or ()
            }
        )
        return JSONResponse(
            {"detail": f"{request.method} is not allowed here; use {', '.join(allowed)}.", "fields": {}},
            status_code=405,
            headers={"Allow": ", ".join(allowed)},
        )
