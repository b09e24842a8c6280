"""The results store: `Store(url)` over SQLite (WAL) or PostgreSQL, and `get_store(settings)`."""

from normlab.store.rows import RollupRow, RunRow
from normlab.store.store import EventRow, Store, event_json, get_store, new_run_id

__all__ = ["EventRow", "RollupRow", "RunRow", "Store", "event_json", "get_store", "new_run_id"]
