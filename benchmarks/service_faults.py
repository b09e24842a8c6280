"""Faults on purpose, for tests and benchmarks: `TCPProxy` cuts every connection to a service (a database
going away) and lets them back, or goes silent (holds every byte, closes nothing: a partition);
`RedisServer` is a redis-server of our own that can be shut down and started again."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time

from benchmarks.service import free_port


class RedisServer:
    """A redis-server of our own on a free port (no persistence), restartable; `url` is its database 0."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def up(self) -> None:
        """Start it and wait (10 s at most) until it answers PING."""
        subprocess.run(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--daemonize",
                "yes",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            check=True,
            capture_output=True,
            timeout=10,
        )
        deadline = time.monotonic() + 10
        while (
            subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True
            ).stdout.strip()
            != "PONG"
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    def down(self) -> None:
        subprocess.run(
            ["redis-cli", "-p", str(self.port), "shutdown", "nosave"], capture_output=True, timeout=10
        )


class TCPProxy:
    """A loopback TCP forwarder to `target` that can be stopped (listener closed, every open
    connection cut — like a database going away) and started again on the same port, or silenced:
    connections stay open and new ones are accepted, but nothing is forwarded either way until
    `resume()` (a network partition, a firewall dropping state) — the peer's kernel still acknowledges
    what is sent, so only a client-side deadline notices."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._socks: set = set()
        self._listener: socket.socket | None = None
        self._flowing = threading.Event()
        self._flowing.set()

    def silence(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def start(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            ls, self._listener = self._listener, None
            socks, self._socks = self._socks, set()
        if ls is not None:
            with contextlib.suppress(OSError):
                ls.shutdown(socket.SHUT_RDWR)
            ls.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, ls) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            self._flowing.wait()
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)  # idle pooled connections are normal, not a fault
            except OSError:
                client.close()
                continue
            with self._lock:
                alive = self._listener is ls
                if alive:
                    self._socks |= {client, upstream}
            if not alive:  # accepted just before a stop: cut like the rest, or it would outlive the outage
                client.close()
                upstream.close()
                return
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                self._flowing.wait()
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.close()
        with contextlib.suppress(OSError):
            src.close()
