"""wait_for: a condition's first truthy value, polled until a bounded deadline (the one poll loop the tests
share, so a test waits for the state it needs instead of sleeping a fixed time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float, what: str, period: float = 0.1) -> T:
    """The first truthy value `condition()` returns; an AssertionError naming `what` once `timeout`
    seconds have passed without one (the condition is asked once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {value!r})")
        time.sleep(period)
