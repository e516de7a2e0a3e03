"""Waiting for a condition with a deadline: the one polling loop of the project."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(probe: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call `probe` until it returns a truthy value and return that value.

    Raises TimeoutError naming `what` (and the last value seen) at the deadline.
    Exceptions from `probe` propagate: a probe that tolerates some failures
    catches them itself.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f} s (last: {value!r})")
        time.sleep(interval)
