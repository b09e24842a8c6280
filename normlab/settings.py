"""One typed `Settings`, read from the environment (``NORMLAB_*``) and passed down.

`Settings()` is built once at an edge (the CLI's `settings_from`, the worker's `celery -A` app, a
benchmark run as a script) and handed to everything below it; no module reads it for itself
(tests/test_architecture.py checks). Nothing else in normlab reads ``os.environ``. Celery takes its
configuration from this object too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NORMLAB_", extra="ignore")

    # Where the embedded form keeps its SQLite store and where MNIST's IDX files are looked for
    # (``<data_dir>/mnist``).
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".normlab")
    # Results store: empty = SQLite (WAL) at <data_dir>/normlab.sqlite; or a PostgreSQL URL.
    database_url: str = ""
    # PostgreSQL: every call (connect, statement, a silent peer) fails after this long, so the API answers
    # 503 and the workers retry instead of hanging (normlab/store/deadline.py).
    db_timeout_s: float = Field(3.0, gt=0, le=300)
    # Celery broker: empty = the embedded form (no Redis); e.g. redis://127.0.0.1:6379/0.
    broker_url: str = ""
    # Live feed: 'auto' = Redis Streams when redis_url is set, else the embedded feed.
    feed: Literal["auto", "redis", "embedded"] = "auto"
    redis_url: str = ""
    feed_maxlen: int = Field(100_000, ge=100)  # approximate cap of each run's Redis Stream
    # Celery queue name; also the prefix of the feed's Redis keys (tests use a unique one per run).
    queue: str = Field("normlab", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    feed_poll_s: float = Field(0.05, gt=0, le=5)  # embedded feed: how often the API tails the store
    sse_heartbeat_s: float = Field(10.0, gt=0)
    # Kernels: 'auto' = the Triton kernel on CUDA tensors, torch otherwise; 'torch' forces torch (A/B).
    kernel_backend: Literal["auto", "torch", "triton"] = "auto"
    # CUDA: replay each fused LN-LSTM / LN-GRU recurrence (2T launches a step) as one captured CUDA graph
    # per shape (kernels.graphs); off = the same launches from Python (same results, more host time).
    cuda_graphs: bool = True
    # CPU engine (float32): the LSTM's per-step work in a C function built on first use with `cc`
    # (compiler: empty = cc/gcc on PATH) into cache_dir; off = torch's own ops (A/B runs, odd platforms).
    native_step: bool = True
    cc: str = ""
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "normlab")
    # Checkpoints (forks, resume): empty = <data_dir>/checkpoints, which suits the embedded form; a lab
    # server's workers and API must all see one directory (a shared mount) at NORMLAB_CHECKPOINT_DIR.
    checkpoint_dir: Path | None = None
    # Per-run cap on checkpoint bytes: older ones go first, never the latest or one a fork started from.
    checkpoint_bytes_per_run: int = Field(256 * 2**20, ge=0)
    # Normalizers of your own (normlab_client.norms): modules to import at start, comma-separated, beside
    # the entry points of group `normlab.norms`, which are always loaded.
    plugins: str = ""
    # Workers
    worker_heartbeat_s: float = Field(2.0, gt=0)
    lost_after_s: float = Field(20.0, gt=0)  # no heartbeat for this long -> the run is 'lost'
    max_run_seconds: int = Field(6 * 3600, ge=60)  # longest allowed run; broker visibility timeout above it
    # Service
    host: str = "127.0.0.1"
    # NORMLAB_PORT; unset = each command's own default (up and frontend 8050, api 8000); --port wins
    port: int | None = Field(None, ge=1, le=65535)
    api_url: str = ""  # where the front end finds the API; empty = same origin
    # Auth and limits (the shared lab server)
    auth: Literal["off", "tokens"] = "off"
    public_read: bool = True
    max_steps: int = Field(20_000, ge=1)
    max_params: int = Field(5_000_000, ge=1)
    max_seq_tokens: int = Field(262_144, ge=1)  # seq_len × batch_size
    max_active_runs_per_user: int = Field(20, ge=1)
    submit_rate_per_minute: int = Field(120, ge=1)
    intervention_rate_per_minute: int = Field(60, ge=1)  # live interventions, per user (auth on)
    min_probe_every: int = Field(5, ge=1)  # probes (hidden traces, Fisher) at most every N steps
    # A server-wide cap on queued + running runs (every user together, auth on or off): the queue and the
    # store stay bounded on a server without tokens too.
    max_active_runs: int = Field(1000, ge=1)
    # Larger request bodies get 413. A spec or sweep is a few kB at most; parsing JSON holds the API's
    # event loop, so a body of megabytes would stall every other request meanwhile.
    max_body_bytes: int = Field(65_536, ge=1024)
    # Open event streams: per client address and for the whole server (429 past them). A browser tab
    # holds one multiplexed stream.
    max_streams_per_client: int = Field(16, ge=1)
    max_streams: int = Field(1000, ge=1)

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "normlab.sqlite"

    @property
    def checkpoint_root(self) -> Path:
        return self.checkpoint_dir or self.data_dir / "checkpoints"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.sqlite_path}"

    @property
    def uses_redis_feed(self) -> bool:
        return self.feed == "redis" or (self.feed == "auto" and bool(self.redis_url))
