"""Deadlines on every PostgreSQL call: `pg_engine(url, timeout_s)`.

A database that stops answering without closing anything (a network partition, a NAT or firewall
dropping its state, a proxy that hangs) leaves a client blocked in `recv` for as long as the kernel
keeps the connection, which can be hours. Each layer gets its own bound:

- connecting (and authenticating): libpq's `connect_timeout`;
- a statement the server is slow to finish: the server's `statement_timeout` (and lock waits with it);
- a transaction its client was cut off from: the server's `idle_in_transaction_session_timeout`;
- a peer that stopped acknowledging what we send: TCP keepalives and `tcp_user_timeout`;
- a peer that acknowledges but never answers (a hung proxy, a stopped server process): the watchdog
  below, which shuts the socket of any connection held longer than the deadline. The blocked call then
  fails at once with a disconnect error, SQLAlchemy drops the connection, and the caller answers 503
  or retries.
- waiting for a free connection from the pool: `pool_timeout`.
- a transaction whose client was cut off at a moment the server's idle timer does not cover (a
  pipelined batch whose end never arrived): `end_abandoned_transactions`, which the API's reaper calls
  when a write of its own was held up; it ends this application's sessions left idle in a transaction
  for longer than the server's own limit, the row locks they hold with them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine.interfaces import DBAPIConnection, Dialect
from sqlalchemy.exc import InvalidatePoolError
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

log = logging.getLogger(__name__)


def pg_connect_args(timeout_s: float) -> dict[str, Any]:
    """libpq options that bound connecting, slow statements and an unresponsive peer."""
    ms = int(timeout_s * 1000)
    return {
        "connect_timeout": max(2, round(timeout_s)),  # libpq counts whole seconds, at least 2
        "keepalives": 1,
        "keepalives_idle": max(1, round(timeout_s)),
        "keepalives_interval": 1,
        "keepalives_count": 2,
        "tcp_user_timeout": ms,
        # A client cut off mid-transaction (a partition) leaves its server backend holding row locks
        # until the server's own keepalives notice, which can be hours: the server ends such a
        # transaction itself once it has waited twice the deadline for the client's next command.
        "options": f"-c statement_timeout={ms} -c lock_timeout={ms} "
        f"-c idle_in_transaction_session_timeout={2 * ms}",
    }


APPLICATION_NAME = "normlab"  # unless the URL names one: how this application's sessions are told apart


def pg_engine(url: str, timeout_s: float, **kwargs: Any) -> Engine:
    """A PostgreSQL engine whose every call fails within about `timeout_s` when the database is silent."""
    # SQLAlchemy's own pre-ping runs before any checkout listener, outside the watchdog's view: it is
    # done here instead, inside the deadline.
    pre_ping = kwargs.pop("pool_pre_ping", False)
    connect_args = pg_connect_args(timeout_s)
    if "application_name=" not in url:
        connect_args["application_name"] = APPLICATION_NAME
    if "options=" in url:  # the URL's own options (e.g. a search_path) come first, ours after
        kwargs.setdefault("connect_args", {}).update(
            {k: v for k, v in connect_args.items() if k != "options"}
        )
        engine = create_engine(url, pool_timeout=timeout_s, **kwargs)
        extra = connect_args["options"]

        @event.listens_for(engine, "do_connect")
        def _add_options(
            _dialect: Dialect, _conn_rec: ConnectionPoolEntry, _cargs: list[Any], cparams: dict[str, Any]
        ) -> None:
            cparams["options"] = f"{cparams.get('options', '')} {extra}".strip()
    else:
        kwargs.setdefault("connect_args", {}).update(connect_args)
        engine = create_engine(url, pool_timeout=timeout_s, **kwargs)
    Watchdog(engine, timeout_s, pre_ping)
    return engine


HELD_UP = ("57014", "55P03")  # SQLSTATE: query_canceled (statement_timeout), lock_not_available


def held_up(exc: BaseException) -> bool:
    """Whether a store call failed because the database answered but the call waited too long (a
    statement or lock timeout), rather than because the database was away."""
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in HELD_UP


def end_abandoned_transactions(engine: Engine, idle_s: float) -> int:
    """End this application's sessions (same user, database and application_name) that have sat idle in
    a transaction for over `idle_s`; return how many. The server ends such a session itself after
    idle_in_transaction_session_timeout, except when the client was cut off in the middle of a
    pipelined batch: the server then waits for the rest of it with no timer running, holding the batch's
    row locks, and every later write of those rows waits behind it."""
    with engine.connect() as conn:
        ended = conn.execute(
            text(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE usename = current_user AND datname = current_database() "
                "AND application_name = current_setting('application_name') "
                "AND state = 'idle in transaction' AND pid <> pg_backend_pid() "
                "AND state_change < now() - make_interval(secs => :idle_s)"
            ),
            {"idle_s": idle_s},
        ).scalar_one()
        conn.commit()
    if ended:
        log.warning("ended %d session(s) left idle in a transaction for over %.1f s", ended, idle_s)
    return int(ended)


class Watchdog:
    """Cuts the connection of any checkout that lasts longer than `timeout_s` (see the module
    docstring). One thread per process, started on first use (a forked worker child starts its own)."""

    def __init__(self, engine: Engine, timeout_s: float, pre_ping: bool = False):
        self.timeout_s = timeout_s
        self._ping = engine.dialect.do_ping if pre_ping else None
        self._busy: dict[int, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._pid = 0
        event.listen(engine, "checkout", self._checkout)
        event.listen(engine, "checkin", self._checkin)
        event.listen(engine, "close", self._checkin)
        event.listen(engine, "invalidate", lambda _c, rec, _e: self._checkin(None, rec))

    def _checkout(
        self, dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry, _proxy: PoolProxiedConnection
    ) -> None:
        with self._lock:
            self._busy[id(record)] = (time.monotonic() + self.timeout_s, dbapi_conn)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._watch, name="db-deadline", daemon=True).start()
        if self._ping is not None:
            try:
                self._ping(dbapi_conn)
            except Exception as exc:  # the pool drops its connections and opens a new one
                raise InvalidatePoolError(f"pre-ping failed: {exc}") from exc

    def _checkin(self, _dbapi_conn: DBAPIConnection | None, record: ConnectionPoolEntry) -> None:
        with self._lock:
            self._busy.pop(id(record), None)

    def _watch(self) -> None:
        period = min(0.25, self.timeout_s / 4)
        while True:
            time.sleep(period)
            now = time.monotonic()
            with self._lock:
                late = [(key, conn) for key, (due, conn) in self._busy.items() if due < now]
                for key, _conn in late:
                    del self._busy[key]
            for _key, conn in late:
                log.warning("database call took over %.1f s; cutting its connection", self.timeout_s)
                cut(conn)


def cut(dbapi_conn: DBAPIConnection) -> None:
    """Shut a psycopg connection's socket down so a call blocked on it fails at once."""
    with contextlib.suppress(Exception):
        pgconn = getattr(dbapi_conn, "pgconn", None)  # psycopg's; no other driver is cut
        if pgconn is None:
            return
        fd = pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()
