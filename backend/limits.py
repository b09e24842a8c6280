"""This server's limits: job size (`spec_problems` -> 422), per-user quotas (`admit` -> 429 with
Retry-After), and request size (`BodyLimit` middleware -> 413). Every message says what to change.

Quotas (active runs per user, submissions per minute) apply to named users, i.e. with
`NORMLAB_AUTH=tokens`. With auth off, every anonymous submitter shares one submission rate, and a
server-wide cap on queued + running runs (`max_active_runs`) holds in every mode.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque

from fastapi import HTTPException
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from normlab.settings import Settings
from normlab.store import Store
from normlab.store.schema import runs
from normlab_client.catalog import TASKS
from normlab_client.events import ACTIVE_STATUSES, RunStatus
from normlab_client.spec import WATCHED_TASK, RunSpec

# Inputs and outputs per time step (sequence) or per case (flat): the engine's task loaders' shapes.
# Checked against the real models in tests/backend/hardening/test_limits.py.
TASK_DIMS = {
    "digits": (64, 10),
    "digits-mse": (64, 10),
    "mnist": (784, 10),
    "mnist1d": (40, 10),
    "seq-digits": (8, 10),
    "adding": (2, 1),
    "copy": (10, 10),
    "charlm": (101, 101),
    "conv-digits": (1, 10),
    "conv-mnist5k": (1, 10),
    "mnist5k": (784, 10),
    "pixel-digits": (1, 10),
    "pixel-mnist5k": (1, 10),
    "handwriting": (3, 121),
    "draw": (196, 2),
    "order-embed": (208, 128),
    "reverse": (16, 10),  # sequence length in, symbols out
}
GATES = {"lstm": 4, "gru": 3, "tanh": 1}
# Tasks that bring their own model (one recurrent layer of size h, whatever `layers` says): its size is
# a·h² + b·h + c, read off the built models (tests/backend/hardening/test_limits.py checks it).
OWN_MODEL_PARAMS: dict[str, dict[str, tuple[int, int, int]]] = {
    "draw": {"none": (12, 1832, 216), "layer": (12, 1836, 216)},
    "order-embed": {"none": (3, 296, 1152), "layer": (3, 305, 1152)},
}
RATE_WINDOW_S = 60.0
ANONYMOUS = "\x00anonymous"  # the rate key of every submitter without a token (never a user's name)


def estimate_params(spec: RunSpec) -> int:
    """About how many parameters the resolved spec's model has (weights exactly; biases, gains and
    normalizer parameters approximately) — without importing torch."""
    info = TASKS[spec.task]
    d_in, d_out = TASK_DIMS.get(spec.task, (1024, 1024))
    h, layers = spec.hidden_size or info.hidden_size, spec.layers or info.layers
    if spec.task == "reverse":  # the tiny Transformer: embeddings, `layers` blocks, the head
        block = 12 * h * h + 13 * h  # attention 4h² + 4h, feed-forward 8h² + 5h, two LayerNorms 4h
        return int(layers * block + h * (2 * d_out + d_in) + 2 * h + d_out)
    if spec.task in OWN_MODEL_PARAMS:
        a, b, c = OWN_MODEL_PARAMS[spec.task][spec.norm]
        return a * h * h + b * h + c
    if info.kind == "flat":
        weights = d_in * h + (layers - 1) * h * h + h * d_out
        extra: float = layers * 3 * h + d_out
    elif info.kind == "image":
        weights = 9 * d_in * h + (layers - 1) * 9 * h * h + 16 * h * d_out
        extra = layers * 3 * h + d_out
    else:
        g = GATES[spec.cell or "lstm"]
        weights = g * h * (d_in + h) + (layers - 1) * g * h * (2 * h) + h * d_out
        extra = layers * _recurrent_extra(spec.cell or "lstm", spec.norm) * g * h + d_out
    return int(weights + extra)


def _recurrent_extra(cell: str, norm: str) -> float:
    """Biases, gains and normalizer parameters of one recurrent layer per gate unit (g·h), as built:
    one bias without a normalizer; WeightNorm adds a gain per row of W_x and W_h (one matrix for the
    tanh RNN); the other normalizers a gain and a bias on each normalized summed input, plus LN(c_t)'s
    2h for the LSTM (0.5 per gate unit)."""
    if norm == "none":
        return 1.0
    if norm == "weight":
        return 2.0 if cell == "tanh" else 3.0
    return {"lstm": 5.5, "gru": 4.0, "tanh": 2.0}[cell]


def spec_problems(spec: RunSpec, settings: Settings) -> dict[str, str]:
    """Job-size limits for a resolved spec: {field: message saying what to change}."""
    if spec.task == WATCHED_TASK:
        return {
            "task": "Runs of task 'watched' come from watch() in your own script (docs/watch.md); "
            "choose a task of the catalog to train here."
        }
    out: dict[str, str] = {}
    if spec.steps is not None and spec.steps > settings.max_steps:
        out["steps"] = (
            f"This server allows at most {settings.max_steps} steps per run (got {spec.steps}); "
            "lower steps (NORMLAB_MAX_STEPS sets the limit)."
        )
    if spec.seq_len is not None:
        tokens = max(spec.seq_len, spec.eval_seq_len or 0) * spec.batch_size
        if tokens > settings.max_seq_tokens:
            out["seq_len"] = (
                f"seq_len × batch_size = {tokens} exceeds this server's "
                f"{settings.max_seq_tokens}; shorten the sequences or the batch "
                "(NORMLAB_MAX_SEQ_TOKENS sets the limit)."
            )
    n = estimate_params(spec)
    if n > settings.max_params:
        out["hidden_size"] = (
            f"This model has about {n:,} parameters; this server allows "
            f"{settings.max_params:,}. Lower hidden_size or layers "
            "(NORMLAB_MAX_PARAMS sets the limit)."
        )
    if spec.probes.enabled:
        every = settings.min_probe_every
        for name in ("trace_every", "fisher_every"):
            value = getattr(spec.probes, name)
            if value < every:
                out[f"probes.{name}"] = (
                    f"Probes may run at most every {every} steps on this server "
                    f"(got {name}={value}); raise it (NORMLAB_MIN_PROBE_EVERY sets "
                    "the limit)."
                )
    return out


def limits_public(settings: Settings) -> dict[str, int]:
    return {
        "max_steps": settings.max_steps,
        "max_params": settings.max_params,
        "max_seq_tokens": settings.max_seq_tokens,
        "min_probe_every": settings.min_probe_every,
        "max_active_runs_per_user": settings.max_active_runs_per_user,
        "submit_rate_per_minute": settings.submit_rate_per_minute,
        "max_active_runs": settings.max_active_runs,
        "max_body_bytes": settings.max_body_bytes,
    }


class RateLimiter:
    """A sliding one-minute window of submission times per user (in this API process)."""

    def __init__(self) -> None:
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: str, per_minute: int, now: float | None = None) -> float:
        """Record a submission; 0 if allowed, else the seconds until one is allowed (nothing recorded)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            q = self._seen.setdefault(key, deque())
            while q and q[0] <= now - RATE_WINDOW_S:
                q.popleft()
            if len(q) >= per_minute:
                return q[0] + RATE_WINDOW_S - now
            q.append(now)
            return 0.0


_limiters: dict[str, RateLimiter] = {}


def limiter_for(store: Store) -> RateLimiter:
    return _limiters.setdefault(store.url, RateLimiter())


def active_runs(store: Store, owner: str) -> tuple[int, int | None]:
    """(runs of this owner queued or running, queue position of their oldest queued run)."""
    with store.engine.connect() as conn:
        n = conn.execute(
            select(func.count())
            .select_from(runs)
            .where(runs.c.owner == owner, runs.c.status.in_(ACTIVE_STATUSES))
        ).scalar_one()
        oldest = conn.execute(
            select(func.min(runs.c.created_at)).where(
                runs.c.owner == owner, runs.c.status == RunStatus.QUEUED
            )
        ).scalar_one_or_none()
    return int(n), (store.queue_position(oldest) if oldest is not None else None)


def too_many(detail: str, retry_after_s: float, field: str) -> HTTPException:
    seconds = max(1, math.ceil(retry_after_s))
    return HTTPException(
        429, {"detail": detail, "fields": {field: detail}}, headers={"Retry-After": str(seconds)}
    )


def admit(store: Store, settings: Settings, owner: str | None, n_runs: int) -> None:
    """429 when the server would exceed its cap on active runs, or `owner` their active-run cap or
    submission rate. Without named users (auth off) all anonymous submissions share one rate."""
    total = active_total(store)
    if total + n_runs > settings.max_active_runs:
        raise server_full(settings, total, n_runs)
    if owner is None or settings.auth == "off":
        wait = limiter_for(store).hit(ANONYMOUS, settings.submit_rate_per_minute)
        if wait > 0:
            raise too_many(
                f"Too many submissions: this server takes {settings.submit_rate_per_minute} per "
                f"minute from anonymous users together. Retry in {math.ceil(wait)} s, or submit "
                "several runs at once with POST /api/sweeps (NORMLAB_SUBMIT_RATE_PER_MINUTE sets "
                "the limit).",
                wait,
                "rate",
            )
        return
    cap = settings.max_active_runs_per_user
    active, position = active_runs(store, owner)
    if active + n_runs > cap:
        raise user_full(settings, active, n_runs, position)
    wait = limiter_for(store).hit(owner, settings.submit_rate_per_minute)
    if wait > 0:
        raise too_many(
            f"Too many submissions: this server takes {settings.submit_rate_per_minute} per "
            f"minute per user. Retry in {math.ceil(wait)} s, or submit several runs at once "
            "with POST /api/sweeps (NORMLAB_SUBMIT_RATE_PER_MINUTE sets the limit).",
            wait,
            "rate",
        )


def server_full(settings: Settings, total: int, n_runs: int) -> HTTPException:
    return too_many(
        f"This server has {total} runs queued or running and takes at most "
        f"{settings.max_active_runs} (this request adds {n_runs}). Retry when some have "
        "finished; NORMLAB_MAX_ACTIVE_RUNS sets the limit.",
        30,
        "runs",
    )


def user_full(settings: Settings, active: int, n_runs: int, position: int | None) -> HTTPException:
    where = f" Your oldest queued run is at position {position} in the queue." if position else ""
    return too_many(
        f"You have {active} runs queued or running and this server allows "
        f"{settings.max_active_runs_per_user} per user (this request adds {n_runs}). Wait for some to "
        "finish or cancel queued ones (POST /api/runs/{id}/cancel); NORMLAB_MAX_ACTIVE_RUNS_PER_USER "
        "sets the limit." + where,
        30,
        "runs",
    )


def caps_for(settings: Settings, owner: str | None) -> dict[str, int | None]:
    """The caps `Store.create_runs` enforces atomically (the checks in `admit` answer early)."""
    named = owner is not None and settings.auth != "off"
    return {
        "max_active": settings.max_active_runs,
        "max_per_owner": settings.max_active_runs_per_user if named else None,
    }


def active_total(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(runs).where(runs.c.status.in_(("queued", "running")))
            ).scalar_one()
        )


class BodyLimit:
    """ASGI middleware: 413 for an API request body over `max_bytes` (by Content-Length, or counted
    while it streams in), before any route parses it."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Only the API: the pages mounted at "/" post Dash callback state, which may be large.
        if scope["type"] != "http" or not scope.get("path", "").startswith("/api/"):
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    return await self._reject(send)
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)  # SSE listens on receive for disconnects
        # No Content-Length (chunked): read the body here, counting, then hand it on in one piece.
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._reject(send)
            more = message.get("more_body", False)
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _reject(self, send: Send) -> None:
        import json

        body = json.dumps(
            {
                "detail": f"The request body is larger than this server's {self.max_bytes} "
                "bytes; send less (NORMLAB_MAX_BODY_BYTES sets the limit).",
                "fields": {},
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
