"""A JSON-RPC 2.0 session with an upstream MCP server, over any transport (CONTRACT 1.15, docs/upstreams.md).

The session does not know its transport: each transport delivers decoded messages to `on_message` and reports
its end to `on_close`; the session matches responses to requests by id (any number in flight) and answers the
server's own requests.

Two protocol eras (shared/mcp/messages.py):
- handshake: `initialize` offering 2024-11-05, exactly as the reference does (CONTRACT 1.15); whatever revision
  the server answers is used, then `notifications/initialized`;
- stateless (2026-07-28), over Streamable HTTP only: a `server/discover` probe first; a server that lists
  2026-07-28 is then sent self-contained requests (the envelope in `params._meta`, no session). Anything else
  falls back to the handshake, as the official SDK client does. The SDK's own server answers stateless
  requests with plain JSON instead of an event stream, at a third of the cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from flux7.shared.mcp.messages import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    HANDSHAKE_VERSIONS,
    MODERN_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)

__all__ = [
    "CLIENT_INFO",
    "FALLBACK_VERSION",
    "MODERN_VERSION",
    "OFFERED_VERSION",
    "ConnectTimedOut",
    "ConnectionLost",
    "McpSession",
    "RpcError",
    "Transport",
    "TransportError",
]

log = logging.getLogger("flux7.upstreams.mcp")

OFFERED_VERSION = HANDSHAKE_VERSIONS[0]  # the reference's offer (CONTRACT 1.15); servers answer their own
FALLBACK_VERSION = OFFERED_VERSION
MODERN_VERSION = MODERN_VERSIONS[-1]
CLIENT_INFO = {"name": "flux7-mesh", "version": "0.1.0"}
_PROBE_TIMEOUT = 10.0  # a server that never answers server/discover still gets the handshake

OnMessage = Callable[[Any], None]
OnClose = Callable[[str], None]


class TransportError(Exception):
    """The transport could not carry a message (process gone, HTTP failure)."""


class ConnectTimedOut(TransportError):
    """The connection to the server could not be opened within its connect timeout."""


class ConnectionLost(Exception):
    """The connection ended while a request waited, or before it was sent."""


class RpcError(Exception):
    """A JSON-RPC error answered by the upstream."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"MCP error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data


class Transport(Protocol):
    # True when send() returns only after the server's answer to that request was delivered (streamable HTTP).
    answers_inline: bool
    # True when the transport can carry stateless (2026-07-28) requests (streamable HTTP).
    stateless_capable: bool

    async def open(self, on_message: OnMessage, on_close: OnClose) -> None: ...

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None: ...

    def negotiated(self, version: str) -> None: ...

    async def close(self) -> None: ...


class McpSession:
    def __init__(self, transport: Transport, *, name: str, on_tools_changed: Callable[[], None] | None = None) -> None:
        self.transport = transport
        self.name = name
        self.closed = asyncio.Event()
        self.close_reason = ""
        self.server_info: dict[str, Any] = {}
        self.protocol_version = ""
        self.stateless = False
        self._envelope: dict[str, Any] = {}
        self._on_tools_changed = on_tools_changed
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._next_id = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        await self.transport.open(self._on_message, self._on_close)

    async def connect(self, timeout: float) -> None:
        """Agree on a protocol revision: stateless when the transport and the server both can, else the
        initialize handshake."""
        if self.transport.stateless_capable and await self._discover(min(timeout, _PROBE_TIMEOUT)):
            return
        await self.initialize(timeout)

    async def _discover(self, timeout: float) -> bool:
        envelope = {
            PROTOCOL_VERSION_META_KEY: MODERN_VERSION,
            CLIENT_CAPABILITIES_META_KEY: {},
            CLIENT_INFO_META_KEY: dict(CLIENT_INFO),
        }
        try:
            result = await self.request("server/discover", {"_meta": envelope}, timeout)
        except (RpcError, TransportError, ConnectionLost, TimeoutError) as e:
            if self.closed.is_set():  # the server is unreachable: no era would work
                raise
            log.debug("mcp %s: server/discover refused (%s); using the handshake", self.name, e)
            return False
        versions = result.get("supportedVersions") if isinstance(result, dict) else None
        if not isinstance(versions, list) or MODERN_VERSION not in versions:
            return False
        meta = result.get("_meta")
        info = meta.get(SERVER_INFO_META_KEY) if isinstance(meta, dict) else None
        self.server_info = info if isinstance(info, dict) else {}
        self.protocol_version = MODERN_VERSION
        self.stateless = True
        self._envelope = envelope
        self.transport.negotiated(MODERN_VERSION)
        return True

    async def initialize(self, timeout: float) -> None:
        for offered in dict.fromkeys((OFFERED_VERSION, FALLBACK_VERSION)):
            hello = {"protocolVersion": offered, "capabilities": {}, "clientInfo": dict(CLIENT_INFO)}
            try:
                result = await self.request("initialize", hello, timeout)
            except RpcError as e:
                if offered == FALLBACK_VERSION:
                    raise
                log.info("mcp %s: initialize %s refused (%s); offering %s", self.name, offered, e, FALLBACK_VERSION)
                continue
            if isinstance(result, dict):
                self.server_info = result.get("serverInfo") or {}
                self.protocol_version = str(result.get("protocolVersion") or offered)
            else:
                self.protocol_version = offered
            if self.protocol_version not in HANDSHAKE_VERSIONS:
                log.warning("mcp %s: the server answered protocol %r; going on", self.name, self.protocol_version)
            self.transport.negotiated(self.protocol_version)
            await self.notify("notifications/initialized")
            return

    async def list_tools(self, timeout: float) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(1000):  # a server that pages forever must not hang the connection
            result = await self.request("tools/list", {"cursor": cursor} if cursor else None, timeout)
            if not isinstance(result, dict):
                raise TransportError("tools/list: the result is not an object")
            tools.extend(t for t in result.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("name"), str))
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.transport.send(msg)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """One request; `headers` are extra HTTP headers (stateless `Mcp-Param-*`), ignored off HTTP."""
        if self.closed.is_set():
            raise ConnectionLost(f"connection lost: {self.close_reason}")
        if self.stateless:  # every request carries the envelope; the caller's other _meta keys stay
            params = dict(params or {})
            meta = params.get("_meta")
            params["_meta"] = {**meta, **self._envelope} if isinstance(meta, dict) else self._envelope
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (method, fut)
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        try:
            async with asyncio.timeout(timeout):
                await self.transport.send(msg, headers)
                if self.transport.answers_inline and not fut.done():
                    raise ConnectionLost(f"{method}: the server answered without a response")
                return await fut
        except TimeoutError:
            # Stateless HTTP cancels by closing the request's stream, which the timeout just did.
            if not self.closed.is_set() and not self.stateless:
                self._spawn(self._cancel_upstream(rid))
            raise TimeoutError(f"{method} timed out after {timeout:g}s") from None
        finally:
            self._pending.pop(rid, None)
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: an answer nobody waits for any more is not an error

    async def _cancel_upstream(self, rid: int) -> None:
        with contextlib.suppress(TransportError, OSError):
            await self.notify("notifications/cancelled", {"requestId": rid, "reason": "timeout"})

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_message(self, msg: Any) -> None:
        if isinstance(msg, list):  # a batch
            for item in msg:
                self._on_message(item)
            return
        if not isinstance(msg, dict):
            return
        method = msg.get("method")
        if isinstance(method, str):
            if "id" in msg:
                self._spawn(self._answer(msg["id"], method))
            elif method == "notifications/tools/list_changed" and self._on_tools_changed is not None:
                self._on_tools_changed()
            return
        rid = msg.get("id")
        if isinstance(rid, str) and rid.isdigit():  # a server that echoes ids as strings
            rid = int(rid)
        entry = self._pending.get(rid) if isinstance(rid, int) else None
        if entry is None or entry[1].done():
            return
        err = msg.get("error")
        if isinstance(err, dict):
            code = err.get("code")
            entry[1].set_exception(
                RpcError(code if isinstance(code, int) else -32603, str(err.get("message", "")), err.get("data"))
            )
        else:
            entry[1].set_result(msg.get("result"))

    async def _answer(self, rid: Any, method: str) -> None:
        # The server may ping us; we offer no other client capability (sampling, roots, elicitation).
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
        if method == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        try:
            await self.transport.send(reply)
        except (TransportError, OSError) as e:
            log.debug("mcp %s: could not answer %s: %s", self.name, method, e)

    def _on_close(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason or "closed"
        self.closed.set()
        for method, fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(ConnectionLost(f"connection lost while waiting for {method}: {self.close_reason}"))

    async def close(self) -> None:
        self._on_close("closed by the mesh")
        for task in list(self._tasks):
            task.cancel()
        await self.transport.close()
