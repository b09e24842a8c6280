"""Error answers: every 4xx/5xx body is `{"detail": message, "fields": {field: message}}`."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, InvalidRequestError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from normlab_client.spec import RunSpec, combination_problems

log = logging.getLogger(__name__)


def _field_name(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def validation_fields(errors: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per-field messages from pydantic errors; a spec's combination error names several fields."""
    fields: dict[str, str] = {}
    for err in errors:
        ctx = err.get("ctx") or {}
        prefix = _field_name(tuple(err.get("loc", ())))
        if err.get("type") == "json_invalid":  # loc is ("body", character position)
            where = err["loc"][-1] if len(err.get("loc", ())) > 1 else "?"
            fields["body"] = (
                f"The request body is not valid JSON ({ctx.get('error', 'decode error')} at "
                f'character {where}); send a JSON object, e.g. {{"task": "digits"}}.'
            )
            continue
        if err.get("type") == "missing" and tuple(err.get("loc", ())) == ("body",):
            fields["body"] = 'The request has no body; send a JSON object, e.g. {"task": "digits"}.'
            continue
        if err.get("type") in BOUND_CHECKS and _not_finite(err.get("input")):
            fields.setdefault(prefix, f"Input should be a finite number, got {err['input']!r}")
            continue
        if err.get("type") == "spec_combination":
            per_field = _combination_messages(err.get("input"))
            for name in ctx.get("fields", []):
                key = name if prefix == "body" else f"{prefix}.{name}"
                fields[key] = per_field.get(name, err["msg"])
            continue
        # pydantic prefixes a validator's own message with "Value error, "; the message alone says it
        fields.setdefault(prefix, err.get("msg", "invalid value").removeprefix("Value error, "))
    return fields


BOUND_CHECKS = {"less_than", "less_than_equal", "greater_than", "greater_than_equal", "finite_number"}


def _not_finite(value: object) -> bool:
    """NaN or ±infinity (as a float, or a string pydantic would read as one): bounds checks on them say
    "less than or equal to 10", which does not tell what to change."""
    if isinstance(value, str):
        value = value.strip().lower().lstrip("+-")
        return value in ("nan", "inf", "infinity")
    return isinstance(value, float) and not math.isfinite(value)


def _combination_messages(data: object) -> dict[str, str]:
    """Each field's own message, recomputed from the submitted values (the error joins them)."""
    if not isinstance(data, dict):
        return {}
    try:
        spec = RunSpec.model_construct(**{k: v for k, v in data.items() if k in RunSpec.model_fields})
        out: dict[str, str] = {}
        for name, message in combination_problems(spec):
            out[name] = f"{out[name]} {message}" if name in out else message
        return out
    except Exception:  # a best effort: the joined message is still there
        return {}


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = validation_fields(list(exc.errors()))
        detail = "; ".join(f"{k}: {v}" for k, v in fields.items()) or "Invalid request."
        return JSONResponse({"detail": detail, "fields": fields}, status_code=422)

    @app.exception_handler(StarletteHTTPException)  # also FastAPI's own (a body it cannot parse, 404s)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        fields: dict[str, str] = {}
        detail = exc.detail
        if exc.status_code == 400 and detail == "There was an error parsing the body":
            detail = (
                "The request body could not be parsed: send UTF-8 JSON (an object, nested a few levels "
                'at most), e.g. {"task": "digits"}.'
            )
            fields = {"body": detail}
        if isinstance(detail, dict):
            fields, detail = detail.get("fields", {}), detail.get("detail", "")
        return JSONResponse(
            {"detail": str(detail), "fields": fields},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(PoolTimeout)
    async def _pool_timeout(_request: Request, exc: PoolTimeout) -> JSONResponse:
        # Every connection is busy (or held by calls waiting on a silent database): the same answer.
        log.warning("results database: no free connection (%s)", str(exc).splitlines()[0][:120])
        return outage_response()

    @app.exception_handler(InvalidRequestError)
    async def _closed(_request: Request, exc: InvalidRequestError) -> JSONResponse:
        if str(exc) == "This connection is closed":  # the pool's reconnect attempts all failed
            return outage_response()
        log.error("database error: %s", exc)
        return JSONResponse(
            {
                "detail": "Internal error in the results database; the server's log has the reason.",
                "fields": {},
            },
            status_code=500,
        )

    @app.exception_handler(DBAPIError)
    async def _database(_request: Request, exc: DBAPIError) -> JSONResponse:
        # The driver's own message only: str(exc) would add the SQL and its parameters (a user's input,
        # a token hash) to the log.
        reason = f"{type(exc.orig).__name__}: {str(exc.orig).splitlines()[0] if str(exc.orig) else ''}"
        if is_outage(exc):
            log.warning("results database unavailable: %s", reason)
            return outage_response()
        if isinstance(exc, DataError):  # e.g. a NUL byte, which PostgreSQL refuses in text: bad input
            log.info("the database refused a value: %s", reason)
            return JSONResponse(
                {
                    "detail": "The request holds a value this server cannot store or look up "
                    "(e.g. a NUL byte or a control character); remove it.",
                    "fields": {},
                },
                status_code=422,
            )
        log.error("database error: %s", reason)  # a bug, not an outage: retrying will not help
        return JSONResponse(
            {
                "detail": "Internal error in the results database; the server's log has the reason.",
                "fields": {},
            },
            status_code=500,
        )


def outage_response() -> JSONResponse:
    return JSONResponse(
        {
            "detail": "The results database is unavailable right now; retry in a few "
            "seconds (the server reconnects by itself).",
            "fields": {},
        },
        status_code=503,
        headers={"Retry-After": "5"},
    )


def is_outage(exc: DBAPIError) -> bool:
    """True when the database could not be reached (retry later), False when it refused the statement
    (bad input or a bug: retrying changes nothing)."""
    if exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError)):
        # PostgreSQL's OperationalError also covers "query canceled" and lock timeouts: both transient.
        return True
    return exc.orig is None  # no driver error at all: the pool could not give a connection
