"""Start the test upstreams as real processes on loopback, and wait on conditions instead of sleeping."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.http import free_port
from tests.support.waiting import eventually as _eventually
from tests.support.waiting import wait_until

__all__ = ["MCP_ECHO", "McpHttpProcess", "eventually", "free_port", "stdio_server_config", "wait_port"]

MCP_ECHO = Path(__file__).with_name("mcp_echo.py")


def wait_port(port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts on 127.0.0.1:port (or the process dies, or the time is up)."""

    def listening() -> bool:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, timeout, f"something listening on 127.0.0.1:{port}")


async def eventually(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    return await _eventually(predicate, timeout, what)


def stdio_server_config(name: str, **extra: Any) -> dict[str, Any]:
    """An `mcp_servers:` entry that spawns mcp_echo over stdio."""
    return {"name": name, "transport": "stdio", "command": sys.executable, "args": [str(MCP_ECHO)], **extra}


class McpHttpProcess:
    """mcp_echo served over streamable-http (`/mcp`) or SSE (`/sse`) on a fixed loopback port."""

    def __init__(self, transport: str = "streamable-http", port: int | None = None, env: dict[str, str] | None = None):
        self.transport = transport
        self.port = port or free_port()
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        path = "/mcp" if self.transport == "streamable-http" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> McpHttpProcess:
        cmd = [sys.executable, str(MCP_ECHO), "--transport", self.transport, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            cmd, env={**os.environ, **self.env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.port, proc=self.proc)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> McpHttpProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
