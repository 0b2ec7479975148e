from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest

from flux7.shared.settings import Settings
from flux7.shared.upstreams import CallContext, Registry, Timings

# Fast retries so reconnection tests finish in seconds; the production defaults are CONTRACT 1.15's.
FAST = Timings(
    start_timeout=20,
    reconnect_timeout=10,
    retry_first=0.1,
    retry_max=0.4,
    reconnect_first=0.05,
    reconnect_max=0.4,
    call_timeout=20,
    http_timeout=5,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def settings(**raw: Any) -> Settings:
    return msgspec.convert(raw, Settings)


@pytest.fixture
def ctx() -> CallContext:
    return CallContext(trace_id=TRACE_ID, traceparent=TRACEPARENT, agent_id="alice", session_id="s1")


@pytest.fixture
async def registry_of() -> AsyncIterator[Callable[..., Any]]:
    """Build, start and (at teardown) stop registries: `await registry_of(mcp_servers=[...])`."""
    made: list[Registry] = []

    async def make(timings: Timings = FAST, start: bool = True, **raw: Any) -> Registry:
        reg = Registry(settings(**raw), timings=timings)
        made.append(reg)
        if start:
            await reg.start()
        return reg

    yield make
    for reg in made:
        await reg.stop()
