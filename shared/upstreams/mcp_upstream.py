"""One upstream MCP server: connect, list its tools, forward calls, and keep the connection alive.

A server down at start is retried (5 s doubling to 5 min) with status `retrying`; a connection lost later
is retried (1 s doubling to 30 s) with status `error`. The last tool list stays published while
reconnecting, so an agent's catalogue does not flicker; calls made meanwhile fail fast with a 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import httpx

from ..settings import McpServer
from .base import CallContext, Param, Timings, ToolDef, UpstreamResult
from .classify import classify
from .mcp_session import ConnectionLost, McpSession, RpcError, Transport, TransportError
from .mcp_transports import SseTransport, StdioTransport, StreamableHttpTransport

__all__ = ["McpUpstream", "tool_defs"]

log = logging.getLogger("flux7.upstreams.mcp")


def _param_type(schema: Any) -> str:
    if isinstance(schema, dict):
        t = schema.get("type")
        if isinstance(t, str):
            return t
        if isinstance(t, list):
            return next((x for x in t if isinstance(x, str) and x != "null"), "string")
    return "string"


def tool_defs(server: str, listed: list[dict[str, Any]]) -> list[ToolDef]:
    """The mesh's view of a tools/list answer: `<server>.<tool>`, inputSchema verbatim."""
    out: list[ToolDef] = []
    for t in listed:
        own = t["name"]
        schema = t.get("inputSchema")
        if not isinstance(schema, dict):
            schema = {"type": "object", "properties": {}}
        props: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
        params = [
            Param(name=k, in_="body", type=_param_type(v), required=k in required) for k, v in props.items()
        ]
        annotations = t.get("annotations") if isinstance(t.get("annotations"), dict) else None
        description = t.get("description")
        out.append(
            ToolDef(
                name=f"{server}.{own}",
                description=description if isinstance(description, str) else "",
                params=params,
                source="mcp",
                mcp_server=server,
                classification=classify(own_name=own, params=params, annotations=annotations),
                input_schema=schema,
                upstream_name=own,
                annotations=annotations,
            )
        )
    return out


def _describe(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return str(e) or "timed out"
    return str(e) or e.__class__.__name__


class McpUpstream:
    def __init__(
        self,
        cfg: McpServer,
        http: Callable[[], httpx.AsyncClient],
        timings: Timings,
        on_change: Callable[[], None],
        cwd: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self._http = http
        self._timings = timings
        self._on_change = on_change
        self._cwd = cwd
        self.status = "retrying"
        self.error = "not connected yet"
        self._tools: list[ToolDef] = []
        self._session: McpSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.first_attempt = asyncio.Event()
        self.connected = asyncio.Event()  # set while status is ok; tests and start() wait on it

    # -- the registry's view

    def tools(self) -> list[ToolDef]:
        return self._tools

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "transport": self.cfg.transport, "status": self.status}
        if self.error and self.status != "ok":
            out["error"] = self.error
        out["tools"] = [t.upstream_name for t in self._tools]
        return out

    @property
    def pid(self) -> int | None:
        """The stdio server's process id while connected (tests kill it to exercise reconnection)."""
        session = self._session
        if session is not None and isinstance(session.transport, StdioTransport) and session.transport.proc:
            return session.transport.proc.pid
        return None

    # -- lifecycle

    async def start(self) -> None:
        """Begin connecting; returns after the first attempt, whatever its outcome."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"mcp:{self.name}")
        await self.first_attempt.wait()

    async def stop(self) -> None:
        self._stopping.set()
        for task in (self._task, self._refresh):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._task, self._refresh) if t is not None), return_exceptions=True
        )
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        self.connected.clear()

    def _transport(self) -> Transport:
        cfg = self.cfg
        if cfg.transport == "stdio":
            # A child needs PATH and friends to start at all; the server's own env entries win.
            env = {**os.environ, **cfg.env}
            return StdioTransport(cfg.name, cfg.command, cfg.args, env, self._cwd)
        if cfg.transport == "sse":
            return SseTransport(cfg.name, cfg.url, cfg.headers, self._http(), self._timings.http_timeout)
        return StreamableHttpTransport(
            cfg.name, cfg.url, cfg.headers, self._http(), self._timings.call_timeout
        )

    async def _connect(self) -> tuple[McpSession, list[dict[str, Any]]]:
        session = McpSession(self._transport(), name=self.name, on_tools_changed=self._tools_changed)
        try:
            await session.open()
            await session.initialize(self._timings.call_timeout)
            listed = await session.list_tools(self._timings.call_timeout)
        except BaseException:
            await asyncio.shield(session.close())
            raise
        return session, listed

    async def _pause(self, seconds: float) -> bool:
        """Wait, unless stopping; True when the upstream is being stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return self._stopping.is_set()

    async def _supervise(self) -> None:
        retry_wait = self._timings.retry_first
        reconnect_wait = self._timings.reconnect_first
        ever_connected = False
        while not self._stopping.is_set():
            limit = self._timings.reconnect_timeout if ever_connected else self._timings.start_timeout
            try:
                session, listed = await asyncio.wait_for(self._connect(), limit)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.error = f"connect: {_describe(e)}"
                if ever_connected:
                    self.status, wait = "error", reconnect_wait
                    reconnect_wait = min(reconnect_wait * 2, self._timings.reconnect_max)
                else:
                    self.status, wait = "retrying", retry_wait
                    retry_wait = min(retry_wait * 2, self._timings.retry_max)
                log.warning("mcp %s: %s; next try in %gs", self.name, self.error, wait)
                self.first_attempt.set()
                if await self._pause(wait):
                    return
                continue
            self._session = session
            self._publish(listed)
            self.status, self.error = "ok", ""
            ever_connected = True
            retry_wait, reconnect_wait = self._timings.retry_first, self._timings.reconnect_first
            self.connected.set()
            self.first_attempt.set()
            log.info("mcp %s: connected, %d tools", self.name, len(self._tools))
            waiters = [
                asyncio.ensure_future(self._stopping.wait()),
                asyncio.ensure_future(session.closed.wait()),
            ]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
            self.connected.clear()
            if self._stopping.is_set():
                return
            self._session = None
            await session.close()
            self.status, self.error = "error", f"connection lost: {session.close_reason}"
            log.warning("mcp %s: %s; reconnecting in %gs", self.name, self.error, reconnect_wait)
            if await self._pause(reconnect_wait):
                return
            reconnect_wait = min(reconnect_wait * 2, self._timings.reconnect_max)

    def _publish(self, listed: list[dict[str, Any]]) -> None:
        tools = tool_defs(self.name, listed)
        changed = [t.fingerprint_text() for t in tools] != [t.fingerprint_text() for t in self._tools]
        self._tools = tools
        if changed:
            self._on_change()

    def _tools_changed(self) -> None:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._relist())

    async def _relist(self) -> None:
        session = self._session
        if session is None:
            return
        try:
            self._publish(await session.list_tools(self._timings.call_timeout))
        except (RpcError, ConnectionLost, TransportError, TimeoutError) as e:
            log.warning("mcp %s: tools/list after list_changed failed: %s", self.name, e)

    # -- calls

    async def call(self, tool: ToolDef, arguments: dict[str, Any], ctx: CallContext) -> UpstreamResult:
        session = self._session
        if session is None or session.closed.is_set():
            return UpstreamResult(
                status_code=502, error=f"MCP server {self.name} is not connected: {self.error}"
            )
        params: dict[str, Any] = {"name": tool.upstream_name, "arguments": arguments}
        meta: dict[str, Any] = {}
        if ctx.traceparent:
            meta["traceparent"] = ctx.traceparent
        if self.cfg.forward_identity and ctx.agent_id:
            meta["art.flux7/agent"] = ctx.agent_id
        if meta:
            params["_meta"] = meta
        try:
            result = await session.request("tools/call", params, self._timings.call_timeout)
        except RpcError as e:
            return UpstreamResult(status_code=502, error=f"MCP error {e.code}: {e.message}")
        except (ConnectionLost, TransportError, TimeoutError) as e:
            return UpstreamResult(status_code=502, error=_describe(e))
        return UpstreamResult(result=result, status_code=200)
