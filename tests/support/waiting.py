"""The one way tests wait: poll a condition until it holds or a timeout passes (never a bare sleep).

`wait_until` blocks the calling thread; `eventually` is for coroutines and accepts a predicate that returns an
awaitable. Both return the predicate's truthy value and fail with AssertionError naming what never happened."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["eventually", "wait_until"]

INTERVAL = 0.01  # how often a condition is checked, not a delay anything depends on


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    tick = threading.Event()  # never set: wait() is the polling interval
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        tick.wait(INTERVAL)


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    async def poll() -> Any:
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(INTERVAL)

    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None
