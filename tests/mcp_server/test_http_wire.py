"""/mcp on the wire (CONTRACT 1.14, DESIGN "Transports"): every status code, raw requests, both revisions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcp_server.conftest import write_config
from tests.mcp_server.inproc import ADMIN_TOKEN, META, MODERN, Rpc, bearer, error_of, mesh_client


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, mcp=False, extra=f"auth: {{admin_token: {ADMIN_TOKEN}}}\n")


async def test_initialize_mints_a_session_and_negotiates_the_version(config: Path) -> None:
    async with mesh_client(config) as client:
        for asked, answered in [("2025-06-18", "2025-06-18"), (None, "2024-11-05"), ("1999-01-01", "2025-11-25")]:
            params = {"capabilities": {}, **({"protocolVersion": asked} if asked else {})}
            r = await client.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params},
                headers={**bearer("claude"), "Mcp-Session-Id": "chosen-by-client"},
            )
            assert r.status_code == 200
            sid = r.headers["mcp-session-id"]
            assert sid != "chosen-by-client" and len(sid) == 32 and int(sid, 16) >= 0
            assert r.json()["result"] == {
                "protocolVersion": answered,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "flux7-mesh", "version": "0.1.0"},
            }


async def test_session_requests_need_a_known_session_header(config: Path) -> None:
    async with mesh_client(config) as client:
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
        missing = await client.post("/mcp", json=body, headers=bearer("claude"))
        assert missing.status_code == 400
        assert error_of(missing) == (-32600, "Missing Mcp-Session-Id header")
        unknown = await client.post("/mcp", json=body, headers={**bearer("claude"), "Mcp-Session-Id": "f" * 32})
        assert unknown.status_code == 404
        assert error_of(unknown) == (-32600, "Unknown session")
        assert unknown.json()["id"] == 7


async def test_notifications_get_202_and_ping_answers_empty(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = await Rpc(client).open()
        r = await rpc.notify("notifications/cancelled")
        assert r.status_code == 202 and r.content == b""
        ping = await rpc.post("ping")
        assert ping.json() == {"jsonrpc": "2.0", "id": ping.json()["id"], "result": {}}


async def test_delete_ends_the_session(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = await Rpc(client).open()
        anonymous = await client.delete("/mcp", headers={"Mcp-Session-Id": rpc.session})
        assert anonymous.status_code == 404  # only the opener's credentials end it
        gone = await client.delete("/mcp", headers={**bearer("claude"), "Mcp-Session-Id": rpc.session})
        assert gone.status_code == 204 and gone.content == b""
        again = await client.delete("/mcp", headers={**bearer("claude"), "Mcp-Session-Id": rpc.session})
        assert again.status_code == 404 and error_of(again) == (-32600, "Unknown session")
        assert (await rpc.post("tools/list")).status_code == 404
        missing = await client.delete("/mcp")
        assert missing.status_code == 400 and error_of(missing) == (-32600, "Missing Mcp-Session-Id header")


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH"])
async def test_other_methods_get_405_with_allow(config: Path, method: str) -> None:
    async with mesh_client(config) as client:
        r = await client.request(method, "/mcp")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST, DELETE"


async def test_bad_json_is_400_parse_error_and_a_batch_is_invalid(config: Path) -> None:
    async with mesh_client(config) as client:
        bad = await client.post(
            "/mcp", content=b"{not json", headers={**bearer("claude"), "Content-Type": "application/json"}
        )
        assert bad.status_code == 400
        assert bad.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
        batch = await client.post("/mcp", json=[{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
        assert batch.status_code == 400 and error_of(batch)[0] == -32600


async def test_jwt_error_is_401_invalid_request(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False, extra="auth: {jwt: {jwks_url: 'http://127.0.0.1:9/jwks'}}\n")
    async with mesh_client(config) as client:
        r = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, headers=bearer("claude")
        )
    assert r.status_code == 401
    assert error_of(r) == (-32600, "authentication required: present a valid JWT")


async def test_require_authentication_refuses_anonymous_mcp(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False, extra="auth: {require_authentication: true}\n")
    async with mesh_client(config) as client:
        r = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert r.status_code == 401 and error_of(r) == (-32600, "authentication required")
        ok = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, headers=bearer("claude")
        )
        assert ok.status_code == 200


async def test_foreign_origins_are_refused_unless_listed(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False, extra="console: {allowed_origins: ['https://console.example']}\n")
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with mesh_client(config) as client:
        # another page on loopback (another port) is another origin too: listed or refused (functions/csrf.py)
        for origin in ["https://evil.example", "http://localhost:5173", "http://127.0.0.1:9090", "null"]:
            evil = await client.post("/mcp", json=body, headers={"Origin": origin})
            assert evil.status_code == 403 and error_of(evil)[0] == -32600, origin
        listed = {"Origin": "https://console.example", "Sec-Fetch-Site": "cross-site"}
        assert (await client.post("/mcp", json=body, headers=listed)).status_code == 200
        assert (await client.post("/mcp", json=body)).status_code == 200  # not a browser


async def test_a_session_is_used_only_by_the_identity_that_opened_it(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = await Rpc(client, "claude").open()
        assert "exit_code" in await rpc.text("say.run", {"args": ["hi"]})
        for other in ("", "boss"):  # no credential, or another agent's: the same 404 as an unknown session
            rpc.agent = other
            stolen = await rpc.post("tools/list")
            assert stolen.status_code == 404 and error_of(stolen) == (-32600, "Unknown session")


async def test_a_session_survives_a_restart(config: Path) -> None:
    async with mesh_client(config) as first:
        session = (await Rpc(first).open()).session
    async with mesh_client(config) as second:  # a new process-wide Mesh over the same database
        rpc = Rpc(second)
        rpc.session = session
        r = await rpc.post("tools/list")
    assert r.status_code == 200 and "say.run" in {t["name"] for t in r.json()["result"]["tools"]}


async def test_session_era_errors_are_jsonrpc_errors_inside_200(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = await Rpc(client).open()
        unknown = await rpc.post("resources/list")
        assert unknown.status_code == 200 and error_of(unknown) == (-32601, "Method not found: resources/list")
        no_name = await rpc.post("tools/call", {"arguments": {}})
        assert error_of(no_name) == (-32602, "Missing tool name")
        no_tool = await rpc.post("tools/call", {"name": "nope.nothing", "arguments": {}})
        assert error_of(no_tool) == (-32602, "Unknown tool: nope.nothing")
        operator = await rpc.post("tools/call", {"name": "approval.resolve", "arguments": {"id": "x"}})
        code, message = error_of(operator)
        assert code == -32601
        assert message.startswith("approval.resolve is operator-only — not callable by this agent.")


# -- the stateless revision ---------------------------------------------------------------------------------


async def test_stateless_discover_list_and_call_need_no_session(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = Rpc(client, modern=True)
        discover = await rpc.post("server/discover")
        assert discover.status_code == 200 and "mcp-session-id" not in discover.headers
        result = discover.json()["result"]
        assert result["supportedVersions"] == [MODERN] and result["resultType"] == "complete"
        assert result["capabilities"] == {"tools": {}}
        listed = (await rpc.post("tools/list")).json()["result"]
        assert listed["resultType"] == "complete" and listed["cacheScope"] == "private" and listed["ttlMs"] == 0
        called = await rpc.call("say.run", {"args": ["stateless"]})
        assert called["resultType"] == "complete" and "stateless" in called["content"][0]["text"]


async def test_stateless_header_and_envelope_errors(config: Path) -> None:
    async with mesh_client(config) as client:
        body = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "say.run", "arguments": {}, "_meta": META},
        }
        base = {**bearer("claude"), "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"}
        mismatch = await client.post("/mcp", json=body, headers={**base, "Mcp-Name": "rm.run"})
        assert mismatch.status_code == 400 and error_of(mismatch)[0] == -32020
        wrong_method = await client.post("/mcp", json=body, headers={**base, "Mcp-Method": "tools/list"})
        assert wrong_method.status_code == 400 and error_of(wrong_method)[0] == -32020
        no_meta = {**body, "params": {"name": "say.run", "arguments": {}}}
        missing = await client.post("/mcp", json=no_meta, headers={**base, "Mcp-Name": "say.run"})
        assert missing.status_code == 400 and error_of(missing)[0] == -32602
        future = {**bearer("claude"), "MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "tools/list"}
        meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
        unsupported = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": meta}}, headers=future
        )
        assert unsupported.status_code == 400
        assert unsupported.json()["error"]["code"] == -32022
        assert unsupported.json()["error"]["data"] == {"supported": [MODERN], "requested": "2099-01-01"}


async def test_stateless_unknown_method_is_404_and_unknown_tool_400(config: Path) -> None:
    async with mesh_client(config) as client:
        rpc = Rpc(client, modern=True)
        unknown = await rpc.post("resources/list")
        assert unknown.status_code == 404 and error_of(unknown) == (-32601, "Method not found: resources/list")
        no_tool = await rpc.post("tools/call", {"name": "nope.nothing", "arguments": {}})
        assert no_tool.status_code == 400 and error_of(no_tool) == (-32602, "Unknown tool: nope.nothing")
        note = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/cancelled"},
            headers={"MCP-Protocol-Version": MODERN, "Mcp-Method": "notifications/cancelled"},
        )
        assert note.status_code == 202
