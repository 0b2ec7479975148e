"""A deprecated SSE session (GET /sse, POST /messages) belongs to the credential that opened it, as /mcp sessions
do: another agent's token posting to it gets 404 and nothing reaches the opener's stream."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from flux7.shared.auth.tokens import TokenStore
from flux7.shared.settings import load_settings
from flux7.shared.store.db import database_for
from tests.support.server import running_server

pytestmark = pytest.mark.served


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"storage_path: {tmp_path}/flux7.db\nauth: {{admin_token: adm1n}}\nmemory: {{hybrid: false}}\n")
    return cfg


def _tokens(config: Path, *agents: str) -> list[str]:
    db = database_for(load_settings(config, env={}))
    try:
        return [TokenStore(db).issue(agent).token for agent in agents]
    finally:
        db.close()


def _rpc(rid: int) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/list"}


async def test_another_credential_cannot_post_into_an_sse_session(tmp_path: Path) -> None:
    config = _config(tmp_path)
    alice, mallory = _tokens(config, "alice", "mallory")
    as_alice = {"Authorization": f"Bearer {alice}"}
    with running_server(config) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=10) as client,
            client.stream("GET", "/sse", headers=as_alice) as stream,
        ):
            lines = stream.aiter_lines()
            assert await anext(lines) == "event: endpoint"
            endpoint = (await anext(lines)).removeprefix("data: ")
            assert endpoint.startswith("/messages?sessionId=")
            for other in ({"Authorization": f"Bearer {mallory}"}, {}, {"Authorization": "Bearer adm1n"}):
                hijack = await client.post(endpoint, json=_rpc(66), headers=other)
                assert (hijack.status_code, hijack.text) == (404, "unknown session\n")
            unknown = await client.post("/messages?sessionId=" + "0" * 32, json=_rpc(1), headers=as_alice)
            assert unknown.status_code == 404
            own = await client.post(endpoint, json=_rpc(7), headers=as_alice)
            assert own.status_code == 202
            # the first message on the stream answers alice's own request: nothing of the refused ones arrived
            async for line in lines:
                if line.startswith("data: "):
                    assert json.loads(line.removeprefix("data: "))["id"] == 7
                    break
