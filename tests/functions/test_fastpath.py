"""The fast paths' table and the CORS headers they add (functions/fastpath.py). What they answer is held to the Litestar
routes by tests/functions/test_hotpath.py and test_mcp_hotpath.py."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from litestar.config.cors import CORSConfig
from litestar.middleware._internal.cors import CORSMiddleware

from flux7.functions.app import FAST_PATHS
from flux7.functions.fastpath import FastPaths, cors_headers


def _table(routes: dict[tuple[str, str], Any]) -> FastPaths:
    return FastPaths(cast(Any, None), routes, max_body=1024, allowed_origins=())


def test_the_table_matches_exact_paths_and_one_last_segment() -> None:
    fast = _table(FAST_PATHS)
    tool, mcp = FAST_PATHS[("POST", "/tool/{name}")], FAST_PATHS[("POST", "/mcp")]
    assert fast.route("POST", "/tool/list_pets") is tool
    assert fast.route("POST", "/mcp") is mcp
    for method, path in (
        ("POST", "/tool/"),
        ("POST", "/tool/a/b"),
        ("POST", "/tools"),
        ("POST", "/mcp/"),
        ("GET", "/tool/list_pets"),
        ("DELETE", "/mcp"),
        ("HEAD", "/mcp"),
        ("OPTIONS", "/tool/list_pets"),
    ):
        assert fast.route(method, path) is None, (method, path)
    assert _table({}).route("POST", "/mcp") is None


def test_a_shape_is_a_path_or_a_prefix_and_one_last_segment() -> None:
    for shape in ("/tool/{name}/call", "/tool{name}", "/a/{b/c}"):
        with pytest.raises(ValueError, match="shape"):
            _table({("POST", shape): FAST_PATHS[("POST", "/mcp")]})


def _litestar_cors(config: CORSConfig, origin: str, has_cookie: bool) -> list[tuple[str, str]]:
    """The headers Litestar's own CORS middleware adds to an answer that had content-type and content-length."""
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    wrapped = CORSMiddleware(cast(Any, None), config).send_wrapper(send, origin, has_cookie)
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    asyncio.run(wrapped(cast(Any, start)))
    return [(k.decode(), v.decode()) for k, v in sent[0]["headers"][1:]]


@pytest.mark.parametrize(
    "config",
    [
        CORSConfig(allow_origins=["http://console.example"], allow_headers=["*"], allow_methods=["*"]),
        CORSConfig(allow_origins=["*"], allow_headers=["*"], allow_methods=["*"]),
        CORSConfig(allow_origins=["https://*.example"], allow_credentials=True, expose_headers=["X-Trace-Id"]),
    ],
    ids=["listed", "every origin", "credentials and exposed headers"],
)
def test_the_cors_headers_are_litestars(config: CORSConfig) -> None:
    for origin in ("http://console.example", "https://a.example", "http://evil.test"):
        for cookie in (False, True):
            ours = [(k.lower(), v) for k, v in cors_headers(config, origin, cookie)]
            assert ours == _litestar_cors(config, origin, cookie), (origin, cookie)
