from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.upstreams.servers.http_backend import Backend, running_backend

# Request lines from httpx drown the failure output; keep warnings and errors only.
logging.getLogger("httpx").setLevel(logging.WARNING)


@pytest.fixture
def backend() -> Iterator[Backend]:
    """The pets HTTP backend (with its OpenAPI spec) on a loopback port."""
    with running_backend() as b:
        yield b
