"""One upstream MCP server: connect, list its tools, forward calls, and keep the connection alive.

A server down at start is retried (5 s doubling to 5 min) with status `retrying`; a connection lost later
is retried (1 s doubling to 30 s) with status `error`. The last tool list stays published while
reconnecting, so an agent's catalogue does not flicker; calls made meanwhile fail fast with a 502.
A stateless (2026-07-28) server holds no session that could tell us it restarted, so its tools are listed
again every minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import httpx
import msgspec

from flux7.shared.durations import format_span
from flux7.shared.mcp.messages import SERVER_INFO_META_KEY, encode_header_value
from flux7.shared.settings import McpServer
from flux7.shared.upstreams.base import CallContext, Param, Timings, ToolDef, UpstreamResult
from flux7.shared.upstreams.classify import classify
from flux7.shared.upstreams.mcp_http import is_token
from flux7.shared.upstreams.mcp_session import (
    ConnectionLost,
    ConnectTimedOut,
    McpSession,
    RpcError,
    Transport,
    TransportError,
)
from flux7.shared.upstreams.mcp_transports import SseTransport, StdioTransport, StreamableHttpTransport

__all__ = ["McpServerView", "McpUpstream", "tool_defs"]

log = logging.getLogger("flux7.upstreams.mcp")

RELIST_SECONDS = 60.0  # stateless servers: how often the tool list is fetched again


def _param_type(schema: Any) -> str:
    if isinstance(schema, dict):
        t = schema.get("type")
        if isinstance(t, str):
            return t
        if isinstance(t, list):
            return next((x for x in t if isinstance(x, str) and x != "null"), "string")
    return "string"


def tool_defs(server: str, listed: list[dict[str, Any]]) -> list[ToolDef]:
    """The mesh's view of a tools/list answer: `<server>.<tool>`; inputSchema, outputSchema, title, annotations,
    icons and `_meta` verbatim (tools/list passes them on)."""
    out: list[ToolDef] = []
    for t in listed:
        own = t["name"]
        schema = t.get("inputSchema")
        if not isinstance(schema, dict):
            schema = {"type": "object", "properties": {}}
        props: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
        params = [Param(name=k, in_="body", type=_param_type(v), required=k in required) for k, v in props.items()]
        annotations = t.get("annotations") if isinstance(t.get("annotations"), dict) else None
        description = t.get("description")
        title, output, icons, meta = t.get("title"), t.get("outputSchema"), t.get("icons"), t.get("_meta")
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
                title=title if isinstance(title, str) else None,
                output_schema=output if isinstance(output, dict) else None,
                icons=icons if isinstance(icons, list) else None,
                meta=meta if isinstance(meta, dict) else None,
            )
        )
    return out


def param_header_map(schema: Any) -> dict[tuple[str, ...], str]:
    """The `x-mcp-header` annotations of an input schema (2026-07-28): property path -> header token, for
    string, integer and boolean properties reached through `properties` alone."""
    out: dict[tuple[str, ...], str] = {}
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        props = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(props, dict):
            continue
        for key, sub in props.items():
            if not isinstance(sub, dict):
                continue
            token = sub.get("x-mcp-header")
            if isinstance(token, str) and is_token(token) and sub.get("type") in ("string", "integer", "boolean"):
                out[(*path, key)] = token
            stack.append(((*path, key), sub))
    return out


def param_headers(header_map: dict[tuple[str, ...], str], arguments: dict[str, Any]) -> dict[str, str]:
    """`Mcp-Param-<token>` for each annotated argument present, as the official SDK client renders it."""
    headers: dict[str, str] = {}
    for path, token in header_map.items():
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float):
            try:
                text = str(value)
            except ValueError:  # an int past the conversion limit has no header form
                continue
        else:
            continue
        headers[f"Mcp-Param-{token}"] = encode_header_value(text)
    return headers


def _plain_result(result: Any) -> tuple[Any, str]:
    """A stateless tools/call result in the handshake era's shape: without `resultType: complete` and the
    server's identity stamp, so agents see the same result whatever revision the upstream speaks. Another
    resultType (`input_required`) asks for a round trip the mesh cannot make: an error."""
    if not isinstance(result, dict) or ("resultType" not in result and "_meta" not in result):
        return result, ""
    kind = result.get("resultType", "complete")
    if kind != "complete":
        return None, f"the MCP server answered resultType {kind!r}, which the mesh does not support"
    out = {k: v for k, v in result.items() if k != "resultType"}
    meta = out.get("_meta")
    if isinstance(meta, dict) and SERVER_INFO_META_KEY in meta:
        rest = {k: v for k, v in meta.items() if k != SERVER_INFO_META_KEY}
        if rest:
            out["_meta"] = rest
        else:
            del out["_meta"]
    return out, ""


def _describe(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return str(e) or "timed out"
    return str(e) or e.__class__.__name__


class McpServerView(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A GET /mcp-servers entry (CONTRACT 1.6): the error only while not connected, the tools without their prefix."""

    name: str
    transport: str
    status: str
    error: str = ""
    tools: list[str]


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
        # `timeout:` in the server's entry; connect applies to the HTTP transports only (stdio has none).
        self.connect_timeout, self.read_timeout = cfg.timeout.seconds(timings.connect_timeout, timings.call_timeout)
        self.status = "retrying"
        self.error = "not connected yet"
        self._tools: list[ToolDef] = []
        self._param_maps: dict[str, dict[tuple[str, ...], str]] = {}  # tool -> its Mcp-Param-* headers
        self.relist_every = RELIST_SECONDS
        self._session: McpSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.first_attempt = asyncio.Event()
        self.connected = asyncio.Event()  # set while status is ok; tests and start() wait on it

    # -- the registry's view

    def tools(self) -> list[ToolDef]:
        return self._tools

    def view(self) -> McpServerView:
        return McpServerView(
            name=self.name,
            transport=self.cfg.transport,
            status=self.status,
            error=self.error if self.status != "ok" else "",
            tools=[t.upstream_name for t in self._tools],
        )

    @property
    def protocol(self) -> str:
        """The protocol revision agreed with the server while connected ("2026-07-28" when stateless)."""
        session = self._session
        return session.protocol_version if session is not None else ""

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
        await asyncio.gather(*(t for t in (self._task, self._refresh) if t is not None), return_exceptions=True)
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
            return SseTransport(
                cfg.name, cfg.url, cfg.headers, self._http(), self._timings.http_timeout, self.connect_timeout
            )
        return StreamableHttpTransport(cfg.name, cfg.url, cfg.headers, self.read_timeout, self.connect_timeout)

    async def _connect(self) -> tuple[McpSession, list[dict[str, Any]]]:
        session = McpSession(self._transport(), name=self.name, on_tools_changed=self._tools_changed)
        try:
            await session.open()
            await session.connect(self._timings.call_timeout)
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
                while True:
                    every = self.relist_every if session.stateless else None
                    done, _ = await asyncio.wait(waiters, timeout=every, return_when=asyncio.FIRST_COMPLETED)
                    if done:
                        break
                    self._tools_changed()
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
        self._param_maps = {t.upstream_name: m for t in tools if (m := param_header_map(t.input_schema))}
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
            return UpstreamResult(status_code=502, error=f"MCP server {self.name} is not connected: {self.error}")
        params: dict[str, Any] = {"name": tool.upstream_name, "arguments": arguments}
        meta: dict[str, Any] = {}
        if ctx.traceparent:
            meta["traceparent"] = ctx.traceparent
        if self.cfg.forward_identity and ctx.agent_id:
            meta["art.flux7/agent"] = ctx.agent_id
        if meta:
            params["_meta"] = meta
        header_map = self._param_maps.get(tool.upstream_name) if session.stateless else None
        headers = param_headers(header_map, arguments) if header_map else None
        try:
            result = await session.request("tools/call", params, self.read_timeout, headers)
        except RpcError as e:
            return UpstreamResult(status_code=502, error=f"MCP error {e.code}: {e.message}")
        except ConnectTimedOut as e:
            error = f"upstream connect timed out after {format_span(self.connect_timeout)}: {e}"
            return UpstreamResult(status_code=504, error=error, timed_out=True)
        except TimeoutError:
            waited = format_span(self.read_timeout)
            error = f"upstream timed out after {waited}: MCP server {self.name} did not answer"
            return UpstreamResult(status_code=504, error=error, timed_out=True)
        except (ConnectionLost, TransportError) as e:
            return UpstreamResult(status_code=502, error=_describe(e))
        if session.stateless:
            result, error = _plain_result(result)
            if error:
                return UpstreamResult(status_code=502, error=error)
        return UpstreamResult(result=result, status_code=200)
