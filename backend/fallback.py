"""`add_api_fallback(app)`: with the pages mounted at "/", a request under /api/ that no API route
takes would reach the Dash/Flask catch-all (200 HTML for an unknown path, Flask's own OPTIONS answer
without the Allow the API documents). This route, added after every API route and before the mount,
answers it as the API does: 405 with Allow when the path exists for other methods, else 404 — JSON."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import Match, Mount

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]


def add_api_fallback(app: FastAPI) -> None:
    async def fallback(request: Request) -> JSONResponse:
        routes = [r for r in app.router.routes if r is not this[0] and not isinstance(r, Mount)]
        allowed = {
            method
            for method in METHODS
            if any(r.matches({**request.scope, "method": method})[0] == Match.FULL for r in routes)
        }
        if allowed:
            detail = f"{request.method} is not allowed here; use {', '.join(sorted(allowed))}."
            return JSONResponse(
                {"detail": detail, "fields": {}},
                status_code=405,
                headers={"Allow": ", ".join(sorted(allowed))},
            )
        detail = f"No API endpoint at {request.url.path}; the endpoints are listed at /api/docs."
        return JSONResponse({"detail": detail, "fields": {}}, status_code=404)

    app.add_api_route("/api/{rest:path}", fallback, methods=METHODS, include_in_schema=False)
    this = [app.router.routes[-1]]
