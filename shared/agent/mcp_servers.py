"""MCP servers declared in the agent's configuration (`[[mcp_servers]]`), reached through the official MCP SDK:
a `command` (stdio, started by the agent, in the working directory) or a `url` (Streamable HTTP).

Their tools are offered beside the built-ins as `<server>_<tool>` and governed as `<server>.<tool>`: each call
passes both gates like a built-in (schema, `before_tool` hooks, the local safety layer, where a tool is a read
only when the server marks it `readOnlyHint`, then the mesh's `/decide`), runs on the server, and its outcome is
reported to the mesh. A server that cannot be reached is said at start and left out; the others work.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from flux7.shared.agent.builtin_tools import Builtin, ToolContext, ToolRun
from flux7.shared.agent.config import McpServerConfig

__all__ = ["McpServers"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_RESULT = 30_000


class McpServers:
    def __init__(self, servers: tuple[McpServerConfig, ...], cwd: Path, timeout: float = 60.0) -> None:
        self.servers = servers
        self.cwd = cwd
        self.timeout = timeout
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> tuple[list[Builtin], list[str]]:
        """Connect to every server (lazily imports the SDK); its tools, and a sentence per server that failed."""
        if not self.servers:
            return [], []
        from mcp import Client, StdioServerParameters  # the SDK only when a server is configured

        tools: list[Builtin] = []
        problems: list[str] = []
        for server in self.servers:
            target: Any = (
                StdioServerParameters(
                    command=server.command, args=list(server.args), env=dict(server.env) or None, cwd=str(self.cwd)
                )
                if server.command
                else server.url
            )
            try:
                client = await self._stack.enter_async_context(Client(target, read_timeout_seconds=self.timeout))
                listed = (await client.list_tools()).tools
            except Exception as e:  # any transport or protocol failure: this server is left out, said why
                problems.append(f"MCP server {server.name} is unavailable: {e.__class__.__name__}: {e}")
                continue
            for t in listed:
                read_only = bool(t.annotations is not None and t.annotations.read_only_hint)
                safe = _UNSAFE.sub("_", f"{server.name}_{t.name}")[:64]
                schema = t.input_schema if isinstance(t.input_schema, dict) else {"type": "object"}
                tools.append(
                    Builtin(
                        safe,
                        t.description or t.name,
                        schema,
                        not read_only,
                        _caller(client, t.name),
                        governed_as=f"{server.name}.{t.name}",
                    )
                )
        return tools, problems

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):  # a server that died already has nothing left to close
            await self._stack.aclose()


def _caller(client: Any, name: str) -> Any:
    async def run(arguments: dict[str, Any], _cwd: Path, _limits: ToolContext) -> ToolRun:
        try:
            result = await client.call_tool(name, arguments)
        except Exception as e:  # a JSON-RPC error or a broken transport: the call's error result
            return ToolRun(f"error: {e.__class__.__name__}: {e}", is_error=True)
        texts = [str(getattr(c, "text", "")) for c in result.content if getattr(c, "type", "") == "text"]
        text = "\n".join(texts) if texts else str(result.structured_content or "")
        if len(text) > _MAX_RESULT:
            text = text[:_MAX_RESULT] + f"\n[... {len(text) - _MAX_RESULT} more characters cut]"
        return ToolRun(text, is_error=bool(result.is_error))

    return run
