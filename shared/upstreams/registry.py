"""The registry: every configured upstream behind one interface — lookup by name, list, call, status."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec

from flux7.shared.settings import Settings
from flux7.shared.upstreams.base import CallContext, Source, Timings, ToolDef, UpstreamResult
from flux7.shared.upstreams.cli import CliUpstream
from flux7.shared.upstreams.mcp_upstream import McpServerView, McpUpstream
from flux7.shared.upstreams.openapi import OpenApiUpstream

__all__ = ["Registry"]

log = logging.getLogger("flux7.upstreams")

_DISPATCH = ".__dispatch"
_DERIVED_CACHE = 4096


class Registry:
    """Tools of all sources, in a stable order: MCP servers, CLI tools, OpenAPI specs, each in config order.

    A name two sources both offer goes to the first one (a warning is logged). OpenAPI spec files are read
    here, so a bad file raises ConfigError at construction; MCP tools appear once their server answers.
    """

    def __init__(self, settings: Settings, *, timings: Timings | None = None) -> None:
        self.settings = settings
        self.timings = timings or Timings()
        self._client: httpx.AsyncClient | None = None
        self._listeners: list[Callable[[], None]] = []
        self._started = False
        self.mcp = [McpUpstream(m, self.http, self.timings, self._changed) for m in settings.mcp_servers]
        self.cli = [CliUpstream(c, settings) for c in settings.cli_tools]
        self.openapi = [OpenApiUpstream(o, settings, self.http, self.timings, self._changed) for o in settings.openapi]
        for o in self.openapi:
            if o.cfg.file:
                o.load_file()
        self._sources: list[Source] = [*self.mcp, *self.cli, *self.openapi]
        self._index: dict[str, ToolDef] = {}
        self._owner: dict[str, Source] = {}
        self._ordered: list[ToolDef] = []
        self._derived: dict[str, ToolDef] = {}
        self._rebuild()

    def http(self) -> httpx.AsyncClient:
        """The one keep-alive client all HTTP upstreams share (made on first use, in the running loop)."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.timings.http_timeout,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30.0),
                follow_redirects=False,  # a redirect could hand arguments to another origin
                trust_env=False,  # settings are the only configuration (no proxy variables)
            )
        return self._client

    # -- lifecycle

    async def start(self) -> None:
        """Connect every source in parallel; return once each has had its first try (at most
        start_timeout). Sources that failed keep retrying in the background."""
        if self._started:
            return
        self._started = True
        starts = [asyncio.ensure_future(s.start()) for s in self._sources]
        if starts:
            done, pending = await asyncio.wait(starts, timeout=self.timings.start_timeout + 1.0)
            for task in pending:  # still trying: it goes on in the background
                task.cancel()
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    log.error("upstream start failed: %s", task.exception())
        self._changed()

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self._sources), return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._started = False

    # -- the tool set

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def _changed(self) -> None:
        self._rebuild()
        for fn in list(self._listeners):
            try:
                fn()
            except Exception:
                log.exception("tool-set listener failed")

    def _rebuild(self) -> None:
        index: dict[str, ToolDef] = {}
        owner: dict[str, Source] = {}
        ordered: list[ToolDef] = []
        for source in self._sources:
            for tool in source.tools():
                if tool.name in index:
                    log.warning("tool %s is offered twice; keeping the first (%s)", tool.name, owner[tool.name].name)
                    continue
                index[tool.name] = tool
                owner[tool.name] = source
                ordered.append(tool)
        self._index, self._owner, self._ordered, self._derived = index, owner, ordered, {}

    def lookup(self, name: str) -> ToolDef | None:
        """Exact name first, then the CLI catch-all: `<cli>.<sub>` is `<cli>.__dispatch` running `<sub>`."""
        tool = self._index.get(name)
        if tool is not None:
            return tool
        derived = self._derived.get(name)
        if derived is not None:
            return derived
        start = 0
        while (dot := name.find(".", start)) > 0:
            dispatcher = self._index.get(name[:dot] + _DISPATCH)
            sub = name[dot + 1 :]
            if dispatcher is not None and dispatcher.source == "cli" and sub:
                derived = msgspec.structs.replace(dispatcher, upstream_name=sub)
                if len(self._derived) >= _DERIVED_CACHE:
                    self._derived.clear()
                self._derived[name] = derived
                return derived
            start = dot + 1
        return None

    def tools(self) -> list[ToolDef]:
        return list(self._ordered)

    def servers(self) -> list[McpServerView]:
        """GET /mcp-servers."""
        return [m.view() for m in self.mcp]

    def server(self, name: str) -> McpUpstream | None:
        return next((m for m in self.mcp if m.name == name), None)

    def upstream_of(self, tool: ToolDef) -> tuple[str, str]:
        """(upstream name, source kind) of the upstream that serves `tool`, for metrics; ("", "") when none."""
        source = self._owner.get(tool.name)
        if source is None:
            return "", ""
        kind = "mcp" if source in self.mcp else "cli" if source in self.cli else "openapi"
        return str(source.name), kind

    def endpoint_of(self, tool: ToolDef) -> tuple[str, int, str]:
        """(host, port, network transport) the call to `tool` goes to, for its OpenTelemetry CLIENT span: `tcp`
        with the host and port of an HTTP upstream, `pipe` for a stdio MCP server, nothing for a CLI tool."""
        source = self._owner.get(tool.name)
        if isinstance(source, McpUpstream):
            url = "" if source.cfg.transport == "stdio" else source.cfg.url
            if not url:
                return "", 0, "pipe"
        elif isinstance(source, OpenApiUpstream):
            url = tool.base_url
        else:
            return "", 0, ""
        return (*_host_port(url), "tcp")

    def upstream_states(self) -> list[tuple[str, str, bool | None]]:
        """(name, source, live) per configured upstream: MCP by its connection, an OpenAPI spec URL that
        fails as down, and None (calls decide) for the rest."""
        out: list[tuple[str, str, bool | None]] = [(m.name, "mcp", m.status == "ok") for m in self.mcp]
        out += [(c.name, "cli", None) for c in self.cli]
        out += [(o.name, "openapi", False if o.error else None) for o in self.openapi]
        return out

    # -- calls

    async def call(self, tool: ToolDef, arguments: dict[str, Any], ctx: CallContext) -> UpstreamResult:
        if not isinstance(arguments, dict):
            return UpstreamResult(status_code=400, error="arguments must be a JSON object")
        source = self._owner.get(tool.name)
        if source is None:
            return UpstreamResult(status_code=502, error=f"tool {tool.name} is no longer offered by any upstream")
        return await source.call(tool, arguments, ctx)


@functools.lru_cache(maxsize=256)  # the configured upstreams' URLs: asked on every forwarded call
def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a malformed port in the config: no port rather than no call
        port = 0
    return parts.hostname or "", port
