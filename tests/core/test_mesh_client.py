"""The one client of the mesh's HTTP API (shared/mesh_client.py): against the real app in process (async over
httpx's ASGI transport, sync over Litestar's test transport), and on the wire against a loopback server (both
flavours, the same assertions) for what only the wire shows: headers, the query, proxies, timeouts, refusals."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient
from litestar.testing import transport as litestar_transport

from flux7.functions.app import create_app
from flux7.shared.cli.approvals import approvals
from flux7.shared.cli.control_plane import connect, refusal
from flux7.shared.cli.kit import run
from flux7.shared.mesh import Mesh
from flux7.shared.mesh_client import AsyncMeshClient, MeshClient, MeshError
from flux7.shared.settings import load_settings
from tests.agent.conftest import in_process_mesh, write_mesh_config
from tests.support.http import serve_json
from tests.support.waiting import eventually
from tests.upstreams.servers.http_backend import Backend

DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port

# -- the real app, in process --------------------------------------------------------------------------------------


async def test_a_held_call_is_listed_shown_and_resolved_once(tmp_path: Path, backend: Backend) -> None:
    async with in_process_mesh(write_mesh_config(tmp_path, backend)) as world:
        agent = AsyncMeshClient("http://mesh", token="agent:coder", session_id="s-7", transport=world.transport)
        admin = AsyncMeshClient("http://mesh", token="adm1n", transport=world.transport)
        health = await admin.health()
        assert health["status"] == "ok" and health["config"] and health["tools"] >= 4
        assert {"list_pets", "create_pet"} <= {t["name"] for t in await agent.tools()}

        denied = await agent.call_tool("delete_pet", {"petId": "1"})  # a decision is an answer, not an error
        assert denied.status == 403 and denied.json()["policy"] == "deny"

        held = asyncio.create_task(agent.call_tool("create_pet", {"name": "Kit"}))
        (pending,) = await eventually(lambda: admin.approvals(tool="create_pet"), 10, "the held call")
        assert (pending["agent_id"], pending["tool"], pending["params"]) == ("coder", "create_pet", {"name": "Kit"})
        assert await admin.approvals(tool="list_*") == []  # the glob reaches the server
        detail = await admin.approval(pending["id"][:8])  # a unique prefix
        assert detail["id"] == pending["id"] and detail["status"] == "pending"

        with pytest.raises(MeshError) as refused:  # an agent's claim is no control-plane credential
            await agent.approvals()
        assert refused.value.status == 401

        resolved = await admin.resolve(pending["id"], "approve", resolved_by="tester", reasoning="fine")
        assert resolved == {"status": "approved", "id": pending["id"]}
        done = await asyncio.wait_for(held, 10)
        assert done.status == 200 and done.json()["trace_id"]
        traced = (await admin.request("GET", "/traces", params={"trace": done.json()["trace_id"]}))[0]
        assert traced["session_id"] == "s-7"  # X-Session-Id went with the call

        with pytest.raises(MeshError) as again:
            await admin.resolve(pending["id"], "deny")
        assert (again.value.status, again.value.message) == (409, "approval already resolved")
        with pytest.raises(MeshError) as missing:
            await admin.approval("ffffffffffffffff")
        assert (missing.value.status, str(missing.value)) == (404, "approval not found")
        with pytest.raises(ValueError, match="approve or deny"):
            await admin.resolve(pending["id"], "maybe")
        await agent.aclose()
        await admin.aclose()


class AppTransport(httpx.BaseTransport):
    """Litestar's test transport, which drives the app from a sync caller, as an httpx transport (it has no close)."""

    def __init__(self, app: TestClient[Any]) -> None:
        self._app = litestar_transport.TestClientTransport(app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._app.handle_request(request)


def test_the_sync_client_reads_the_same_app_the_same_way(tmp_path: Path, backend: Backend) -> None:
    mesh = Mesh(load_settings(write_mesh_config(tmp_path, backend), env={}))
    with (
        TestClient(create_app(mesh)) as app,
        MeshClient("http://testserver.local", token="adm1n", transport=AppTransport(app)) as admin,
    ):
        assert admin.health()["status"] == "ok"
        assert admin.approvals() == []
        assert "list_pets" in {t["name"] for t in admin.tools()}
        listed = admin.post_mcp(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode(),
            headers={"Mcp-Session-Id": "none-such"},
        )
        assert listed.status in (400, 404)  # an unknown MCP session: an answer the relay passes on, not an error
        with pytest.raises(MeshError) as refused:
            admin.request("POST", "/halts", json={"scope": "nowhere"})
        assert refused.value.status == 400 and refused.value.message  # the JSON `error` field, not the whole body


# -- the wire, both flavours -----------------------------------------------------------------------------------------


def ask(flavour: str, url: str, call: str, *args: Any, client: dict[str, Any] | None = None, **kw: Any) -> Any:
    """`call` on a fresh client of `flavour` (sync or async), closed afterwards."""
    if flavour == "sync":
        with MeshClient(url, **(client or {})) as c:
            return getattr(c, call)(*args, **kw)

    async def go() -> Any:
        async with AsyncMeshClient(url, **(client or {})) as c:
            return await getattr(c, call)(*args, **kw)

    return asyncio.run(go())


Handler = Callable[[str, str, dict[str, str], bytes], tuple[Any, ...]]

flavours = pytest.mark.parametrize("flavour", ["sync", "async"])


@pytest.fixture
def answers() -> Iterator[Callable[[Handler], tuple[str, list[dict[str, Any]]]]]:
    """A loopback server answering with the handler given (a thread of this process: none is started)."""
    with contextlib.ExitStack() as servers:
        yield lambda handler: servers.enter_context(serve_json(handler))


@flavours
def test_the_credential_the_session_and_the_query_go_on_the_wire(flavour: str, answers: Any) -> None:
    def handler(method: str, path: str, *_: Any) -> tuple[Any, ...]:
        if method == "POST":
            return 200, {"status": "denied", "id": "a1"}
        return 200, [{"id": "a1"}, "not an approval"] if path.startswith("/approvals") else {"status": "ok"}

    url, seen = answers(handler)
    got = ask(flavour, url, "approvals", "pending", "", client={"token": "tok", "session_id": "s-1"})
    assert got == [{"id": "a1"}]  # rows that are not objects are left out
    (request,) = seen
    assert request["path"] == "/approvals?status=pending"  # an empty `tool` is not sent
    assert request["headers"]["authorization"] == "Bearer tok"
    assert request["headers"]["x-session-id"] == "s-1"
    assert request["headers"]["accept"] == "application/json"
    assert ask(flavour, url, "resolve", "a1", "deny", resolved_by="cli:me") == {"status": "denied", "id": "a1"}
    assert (seen[1]["path"], json.loads(seen[1]["body"])) == ("/approvals/a1/deny", {"resolved_by": "cli:me"})
    assert ask(flavour, url, "health") == {"status": "ok"}
    assert "authorization" not in seen[2]["headers"]  # no token, no Authorization header


@flavours
def test_mcp_messages_go_as_they_are_and_come_back_as_they_are(flavour: str, answers: Any) -> None:
    answer = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    url, seen = answers(lambda *_: (200, answer, {"Mcp-Session-Id": "m-1"}))
    line = b'{"jsonrpc": "2.0", "id": 1, "method": "initialize"}'
    reply = ask(flavour, url, "post_mcp", line, headers={"Mcp-Method": "initialize"})
    assert (reply.status, reply.content, reply.headers["mcp-session-id"]) == (200, answer, "m-1")
    assert seen[0]["body"] == line
    assert seen[0]["headers"]["accept"] == "application/json, text/event-stream"
    assert seen[0]["headers"]["content-type"] == "application/json"
    assert seen[0]["headers"]["mcp-method"] == "initialize"
    ended = ask(flavour, url, "end_mcp_session", "m-1")
    assert ended.status == 200 and (seen[1]["method"], seen[1]["headers"]["mcp-session-id"]) == ("DELETE", "m-1")


@flavours
def test_a_refusal_says_what_the_mesh_said(flavour: str, answers: Any) -> None:
    def handler(method: str, path: str, *_: Any) -> tuple[Any, ...]:
        if path == "/json":
            return 409, {"error": "approval already resolved", "id": "x"}
        if path == "/text":
            return 502, b"bad gateway, upstream down\n"
        if path == "/empty":
            return 503, b""
        if path == "/tools":
            return 200, {"tools": []}
        return 200, b"<html>not json</html>"

    url, _ = answers(handler)
    for path, status, message in [
        ("/json", 409, "approval already resolved"),
        ("/text", 502, "bad gateway, upstream down"),
        ("/empty", 503, "Service Unavailable"),
        ("/html", 200, "GET /html: the mesh's answer is not JSON"),
    ]:
        with pytest.raises(MeshError) as refused:
            ask(flavour, url, "request", "GET", path)
        assert (refused.value.status, str(refused.value)) == (status, message)
    with pytest.raises(MeshError, match="GET /tools did not answer a list"):
        ask(flavour, url, "tools")
    assert ask(flavour, url, "send", "GET", "/text").status == 502  # send() answers every status


@flavours
def test_an_unreachable_mesh_is_status_0_naming_the_url(flavour: str) -> None:
    with pytest.raises(MeshError) as unreachable:
        ask(flavour, DEAD, "health")
    e = unreachable.value
    assert e.status == 0 and str(e).startswith(f"cannot reach the mesh at {DEAD}: ")
    assert isinstance(e.__cause__, httpx.ConnectError) and e.detail.startswith("ConnectError: ")


@flavours
def test_proxy_variables_never_reroute_a_call_to_the_mesh(
    flavour: str, answers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = answers(lambda *_: (200, {"status": "ok"}))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, DEAD)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert ask(flavour, url, "health") == {"status": "ok"} and len(seen) == 1


@flavours
def test_a_call_s_own_timeout_bounds_it_on_a_client_without_one(flavour: str, answers: Any) -> None:
    release = threading.Event()

    def stall(*_: Any) -> tuple[Any, ...]:
        release.wait(10)  # until the client has given up
        return 200, []

    url, _ = answers(stall)
    try:
        with pytest.raises(MeshError) as late:
            ask(flavour, url, "approvals", client={"timeout": httpx.Timeout(None, connect=10.0)}, timeout=0.2)
        assert late.value.status == 0 and isinstance(late.value.__cause__, httpx.ReadTimeout)
    finally:
        release.set()


def test_a_resumed_session_s_id_goes_with_every_later_call(answers: Any) -> None:
    url, seen = answers(lambda *_: (200, {"status": "ok"}))
    with MeshClient(url, session_id="old") as c:
        c.health()
        c.set_session("new")
        c.health()

    async def later() -> None:
        async with AsyncMeshClient(url, session_id="old") as c:
            c.set_session("resumed")
            await c.health()

    asyncio.run(later())
    assert [r["headers"]["x-session-id"] for r in seen] == ["old", "new", "resumed"]


# -- the CLI over it -----------------------------------------------------------------------------------------------


def test_mesh_pending_lists_through_the_client_and_names_the_fix_when_unreachable(answers: Any, tmp_path: Path) -> None:
    row = {"id": "0123456789abcdef", "agent_id": "bot", "tool": "echo.run", "remaining": "4m59s", "params": {}}
    url, seen = answers(lambda *_: (200, [row]))
    env = {"MESH_URL": url, "MESH_ADMIN_TOKEN": "adm1n", "HOME": str(tmp_path)}
    out, err = io.StringIO(), io.StringIO()
    assert run(approvals, ["pending"], prog="mesh", out=out, err=err, env=env) == 0, err.getvalue()
    assert out.getvalue().splitlines()[1].split()[:4] == ["01234567", "bot", "echo.run", "4m59s"]
    assert seen[0]["headers"]["authorization"] == "Bearer adm1n"

    dead = {"MESH_URL": DEAD, "MESH_ADMIN_TOKEN": "adm1n", "HOME": str(tmp_path)}
    err = io.StringIO()
    assert run(approvals, ["pending"], prog="mesh", out=io.StringIO(), err=err, env=dead) == 1
    assert f"cannot reach the mesh at {DEAD}: " in err.getvalue()
    with connect(None, {"HOME": str(tmp_path)}, cwd=tmp_path) as local:  # the default URL names how to start it
        line = refusal(MeshError(0, "cannot reach the mesh"), local, {}, cwd=tmp_path)
    assert line.endswith("; start it (scripts/serve, or flux7 serve), or set MESH_URL / --url to where it runs")
