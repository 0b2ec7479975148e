"""An in-process mesh app and a raw JSON-RPC client for /mcp (status codes and texts, no SDK in between)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from flux7.shared.auth.tokens import TokenStore
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from flux7.shared.store.db import database_for
from tests.support import mesh as support

ADMIN_TOKEN = "admin-s3cret"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
}


@asynccontextmanager
async def mesh_client(config: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The mesh of this config in process (tests/support/mesh.py)."""
    async with support.mesh_client(Mesh(load_settings(config))) as client:
        yield client


def bearer(agent: str) -> dict[str, str]:
    return {"Authorization": f"Bearer agent:{agent}"}


def issue_token(config: Path, agent: str) -> str:
    """An agent token (`flux7 token issue <agent>`) in the config's database: a proven identity."""
    db = database_for(load_settings(config))
    try:
        return TokenStore(db).issue(agent).token
    finally:
        db.close()


class Rpc:
    """JSON-RPC over one handshake-era session (or stateless when `modern`)."""

    def __init__(
        self, client: httpx.AsyncClient, agent: str = "claude", *, modern: bool = False, token: str = ""
    ) -> None:
        self.client = client
        self.agent = agent
        self.modern = modern
        self.token = token  # an agent token instead of the `agent:<id>` claim
        self.session = ""
        self._id = 0

    async def open(self, version: str = "2025-11-25") -> Rpc:
        if not self.modern:
            r = await self.post("initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {}})
            assert r.status_code == 200, r.text
            self.session = r.headers["mcp-session-id"]
            assert (await self.notify("notifications/initialized")).status_code == 202
        return self

    def headers(self, method: str, params: dict[str, Any] | None) -> dict[str, str]:
        h = {"Authorization": f"Bearer {self.token}"} if self.token else bearer(self.agent) if self.agent else {}
        if self.session:
            h["Mcp-Session-Id"] = self.session
        if self.modern:
            h.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
            if method == "tools/call" and params:
                h["Mcp-Name"] = params["name"]
        return h

    def _params(self, params: dict[str, Any] | None) -> dict[str, Any] | None:
        if self.modern:
            return {**(params or {}), "_meta": {**META, **((params or {}).get("_meta") or {})}}
        return params

    async def post(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        self._id += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self._id, "method": method}
        if (p := self._params(params)) is not None:
            body["params"] = p
        return await self.client.post("/mcp", json=body, headers=self.headers(method, params))

    async def notify(self, method: str) -> httpx.Response:
        return await self.client.post(
            "/mcp", json={"jsonrpc": "2.0", "method": method}, headers=self.headers(method, None)
        )

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        r = await self.post("tools/call", {"name": name, "arguments": arguments or {}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert "result" in body, body
        return dict(body["result"])

    async def text(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        result = await self.call(name, arguments)
        return str(result["content"][0]["text"])


def error_of(response: httpx.Response) -> tuple[int, str]:
    err = response.json()["error"]
    return int(err["code"]), str(err["message"])
