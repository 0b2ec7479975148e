"""How the mesh reaches memory: one client interface, two implementations (docs/memory.md).

`InProcessMemory` calls the memory role running in this process; `RpcMemory` speaks mem7's JSON-RPC `/rpc`
(CONTRACT 2.1, 2.9) when `memory.url` is set. Both return a tool's text or raise one of two typed errors:
`MemoryUnavailable` (memory could not be asked) and `MemoryToolError` (it answered a tool failure)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import httpx
import msgspec

from flux7.shared.errors import Flux7Error

__all__ = [
    "InProcessMemory",
    "ListedMemory",
    "MemoryClient",
    "MemoryToolError",
    "MemoryUnavailable",
    "RpcMemory",
    "memory_client_for",
    "parse_memory_list",
]


class MemoryUnavailable(Flux7Error):
    """Memory did not answer, answered late, or answered something that is not JSON-RPC."""

    status_code = 503


class MemoryToolError(Flux7Error):
    """Memory answered, with a tool failure (`isError`) or a JSON-RPC error."""

    status_code = 502


class MemoryClient(Protocol):
    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """The tool's first text content; raises MemoryUnavailable or MemoryToolError."""
        ...

    async def aclose(self) -> None: ...


class InProcessMemory:
    """The memory role of this process: `service.call_tool(name, arguments, *, authenticated, meta)`."""

    def __init__(self, service: Any) -> None:
        self._service = service
        self._is_async = inspect.iscoroutinefunction(service.call_tool)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        # The mesh is trusted and has no agent identity: unscoped, as CONTRACT 2.6 says of its decisions.
        try:
            if self._is_async:
                text, is_error = await self._service.call_tool(name, arguments, authenticated=True, meta={})
            else:
                # SQLite work off the event loop, so a slow disk cannot stall every request of the worker.
                text, is_error = await asyncio.to_thread(
                    self._service.call_tool, name, arguments, authenticated=True, meta={}
                )
        except Flux7Error:
            raise
        except Exception as e:
            raise MemoryUnavailable(f"memory {name} failed: {e.__class__.__name__}: {e}") from e
        if is_error:
            raise MemoryToolError(str(text))
        return str(text)

    async def aclose(self) -> None:
        return None


class RpcMemory:
    """mem7 over HTTP: `POST <url>/rpc` with `Authorization: Bearer <token>` when a token is set."""

    def __init__(self, url: str, token: str = "", *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/") + "/rpc"
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout
        self._ids = itertools.count(1)
        # An httpx client belongs to the loop that made it: one per loop (request loop, the writer's loop).
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = httpx.AsyncClient(timeout=self._timeout)
            self._clients[loop] = client
        return client

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        body = msgspec.json.encode(
            {
                "jsonrpc": "2.0",
                "id": next(self._ids),
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        )
        try:
            resp = await self._client().post(self.url, content=body, headers=self._headers)
        except httpx.HTTPError as e:
            raise MemoryUnavailable(f"memory at {self.url} unreachable: {e.__class__.__name__}: {e}") from e
        if resp.status_code >= 400:
            raise MemoryUnavailable(f"memory at {self.url} answered HTTP {resp.status_code}")
        return _result_text(resp.content)

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _result_text(raw: bytes) -> str:
    try:
        reply = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise MemoryUnavailable("memory answered something that is not JSON") from None
    if not isinstance(reply, dict):
        raise MemoryUnavailable("memory answered something that is not a JSON-RPC reply")
    error = reply.get("error")
    if error is not None:
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        raise MemoryToolError(f"memory JSON-RPC error: {message}")
    result = reply.get("result")
    if not isinstance(result, dict):
        raise MemoryUnavailable("memory reply has no result object")
    content = result.get("content") or []
    text = ""
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = str(content[0].get("text", ""))
    if result.get("isError"):
        raise MemoryToolError(text or "memory tool failed")
    return text


def memory_client_for(settings: Any, service: Callable[[], Any]) -> MemoryClient | None:
    """`memory.url` set: over /rpc. Otherwise the in-process role, when this process runs one. Else None."""
    if settings.memory.url:
        return RpcMemory(settings.memory.url, settings.memory.token)
    local = service()
    if local is not None and settings.memory.enabled:
        return InProcessMemory(local)
    return None


class ListedMemory(msgspec.Struct, frozen=True):
    key: str
    tags: tuple[str, ...]
    agent: str
    updated: str


_LIST_HEAD = re.compile(r"^(\d+) memories:$")
# `- <key>[ [t1, t2]][ (by <agent>)] — <RFC3339Z>` (CONTRACT 2.3); the key is taken shortest-first so the
# optional parts bind to the end of the line.
_LIST_LINE = re.compile(r"^- (?P<key>.+?)(?: \[(?P<tags>[^\]]*)\])?(?: \(by (?P<agent>[^)]*)\))? — (?P<ts>\S+)$")


def parse_memory_list(text: str) -> list[ListedMemory]:
    """Parse memory_list's text. Raises ValueError on anything but the documented shape, count included."""
    text = text.strip("\n")
    if text == "No memories found.":
        return []
    lines = text.split("\n")
    head = _LIST_HEAD.match(lines[0])
    if head is None:
        raise ValueError(f"unexpected memory_list header: {lines[0][:80]!r}")
    out: list[ListedMemory] = []
    for line in lines[1:]:
        m = _LIST_LINE.match(line)
        if m is None:
            raise ValueError(f"unexpected memory_list line: {line[:80]!r}")
        tags = tuple(t.strip() for t in (m.group("tags") or "").split(",") if t.strip())
        out.append(ListedMemory(m.group("key"), tags, m.group("agent") or "", m.group("ts")))
    if len(out) != int(head.group(1)):
        raise ValueError(f"memory_list announced {head.group(1)} memories and listed {len(out)}")
    return out
