"""Tokens and ownership for a shared lab server: `TokenStore` (tokens kept as SHA-256 hashes), the
`guard` dependency every API route runs, `require_owner`, and `GET /api/me`.

`NORMLAB_AUTH=off` (the embedded default on one's own machine): nothing asks for a token and runs have
no owner. `NORMLAB_AUTH=tokens`: writes (POST, DELETE) need `Authorization: Bearer <token>`; reads need
one too unless `NORMLAB_PUBLIC_READ=true` (a talk audience, a lab dashboard). Browsers' EventSource
cannot send headers, so GET requests may pass the token as `?token=` instead.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Annotated, Any, cast

import anyio
from fastapi import APIRouter, Depends, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import ColumnElement, insert, select, update

from backend.limits import active_runs, limits_public
from normlab.store import RunRow, Store
from normlab.store.schema import api_tokens as tokens

TOKEN_PREFIX = "nl_"
OPEN_PATHS = ("/api/health", "/api/me")  # answer without a token even when reading is private
CACHE_S = 2.0  # a revoked token stops working within this long in a running API


@dataclass(frozen=True)
class Principal:
    """Who is calling."""

    name: str
    admin: bool = False


def hash_token(token: str) -> str:
    # Tokens are 192 random bits: a plain SHA-256 cannot be brute-forced, and it lets a lookup use the index.
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """Create, revoke, list and check API tokens in the results store's database."""

    def __init__(self, store: Store):
        self.engine = store.engine  # the api_tokens table is the store's (normlab.store.schema)
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    def create(self, user: str, admin: bool = False) -> tuple[str, str]:
        """A new token for `user`: (token id, the token itself — shown once, stored only as a hash)."""
        user = user.strip()
        if not user or len(user) > 128:
            raise ValueError("a user name must have 1 to 128 characters")
        token = TOKEN_PREFIX + secrets.token_urlsafe(24)
        token_id = secrets.token_hex(4)
        with self.engine.begin() as conn:
            conn.execute(
                insert(tokens).values(
                    id=token_id, user=user, admin=admin, token_hash=hash_token(token), created_at=time.time()
                )
            )
        return token_id, token

    def revoke(self, token_id: str | None = None, user: str | None = None) -> int:
        """Revoke one token (by id) or every token of a user; returns how many were revoked."""
        cond: list[ColumnElement[bool]] = [tokens.c.revoked_at.is_(None)]
        if token_id:
            cond.append(tokens.c.id == token_id)
        elif user:
            cond.append(tokens.c.user == user)
        else:
            raise ValueError("give a token id or a user")
        with self.engine.begin() as conn:
            n = conn.execute(update(tokens).where(*cond).values(revoked_at=time.time())).rowcount
        self._cache.clear()
        return int(n)

    def list(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    tokens.c.id, tokens.c.user, tokens.c.admin, tokens.c.created_at, tokens.c.revoked_at
                ).order_by(tokens.c.created_at)
            )
            return [dict(r._mapping) for r in rows]

    def check(self, token: str) -> Principal | None:
        """The token's owner, or None when it is unknown or revoked."""
        key = hash_token(token)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        with self.engine.connect() as conn:
            row = conn.execute(
                select(tokens.c.user, tokens.c.admin).where(
                    tokens.c.token_hash == key, tokens.c.revoked_at.is_(None)
                )
            ).first()
        principal = Principal(row[0], bool(row[1])) if row else None
        if len(self._cache) > 10_000:  # bounded: random tokens from a scanner must not grow it forever
            self._cache.clear()
        self._cache[key] = (now, principal)
        return principal


def token_store(request: Request) -> TokenStore:
    state = request.app.state
    if getattr(state, "tokens", None) is None:
        state.tokens = TokenStore(state.store)
    return cast(TokenStore, state.tokens)


bearer = HTTPBearer(
    auto_error=False,
    description="An API token from `normlab token create --user NAME` "
    "(needed when the server runs with NORMLAB_AUTH=tokens).",
)
UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


async def guard(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None
) -> None:
    """Every API route's first dependency: who is calling (request.state.principal), and 401 when a
    token is needed and missing, unknown or revoked."""
    request.state.principal = None
    settings = request.app.state.settings
    if settings.auth == "off":
        return
    token = creds.credentials if creds is not None else None
    if token is None and request.method == "GET":
        token = request.query_params.get("token")
    if token:
        tokens_ = token_store(request)
        principal = await anyio.to_thread.run_sync(tokens_.check, token[:200])
        if principal is None:
            raise HTTPException(
                401,
                "This API token is unknown or revoked; ask the server's admin for a "
                "new one (normlab token create --user NAME).",
                headers=UNAUTHORIZED,
            )
        request.state.principal = principal
        return
    writing = request.method not in ("GET", "HEAD", "OPTIONS")
    if writing:
        raise HTTPException(
            401,
            "Submitting, cancelling and deleting runs on this server need an API "
            "token: send 'Authorization: Bearer <token>' (normlab token create "
            "--user NAME makes one).",
            headers=UNAUTHORIZED,
        )
    if not settings.public_read and request.url.path not in OPEN_PATHS:
        raise HTTPException(
            401,
            "Reading this server needs an API token (NORMLAB_PUBLIC_READ is off): "
            "send 'Authorization: Bearer <token>', or ?token=<token> for event "
            "streams.",
            headers=UNAUTHORIZED,
        )


def principal_of(request: Request) -> Principal | None:
    return getattr(request.state, "principal", None)


def require_owner(request: Request, run: RunRow, action: str) -> None:
    """403 unless auth is off, or the caller owns the run, or is an admin."""
    if request.app.state.settings.auth == "off":
        return
    who = principal_of(request)
    if who is not None and (who.admin or who.name == run.get("owner")):
        return
    owner = run.get("owner") or "nobody (it was submitted with auth off)"
    raise HTTPException(
        403, f"Run {run['id']} belongs to {owner}; only its owner or an admin may {action} it."
    )


def require_admin(request: Request, what: str) -> None:
    """403 unless auth is off (an open lab has no one to set apart) or the caller is an admin."""
    if request.app.state.settings.auth == "off":
        return
    who = principal_of(request)
    if who is None or not who.admin:
        raise HTTPException(403, f"Only an admin may {what}; launch it without that field.")


router = APIRouter(prefix="/api", tags=["auth"])


@router.get("/me")
def me(request: Request) -> dict[str, Any]:
    """Who the token identifies, whether this server asks for tokens, and its limits."""
    settings = request.app.state.settings
    who = principal_of(request)
    out = {
        "auth": settings.auth,
        "public_read": settings.public_read,
        "user": who.name if who else None,
        "admin": bool(who and who.admin),
        "limits": limits_public(settings),
    }
    if who is not None:
        out["active_runs"], out["oldest_queued_position"] = active_runs(request.app.state.store, who.name)
    return out


GuardDep = Depends(guard)
