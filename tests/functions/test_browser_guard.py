"""The browser guard (functions/csrf.py) in process: every state-changing route refuses what a page on another
site can make a browser send; clients that are not browsers pass; JSON routes want a JSON body; CORS only when
`console.cors` says so. The same attacks from a real page in Chromium are tests/e2e/test_cross_site.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.functions.app import create_app
from flux7.functions.auth import control_plane, grantors, owners, readers, resolvers
from flux7.functions.memory import create_memory_app
from flux7.shared.errors import ConfigError
from flux7.shared.memory.service import MemoryService
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.functions.conftest import ADMIN, AGENT, make_config
from tests.support.mesh import in_process
from tests.upstreams.servers.http_backend import Backend

LISTED = "https://console.example"
BASE = "http://127.0.0.1:9090"
JSON = {"Content-Type": "application/json"}

# One state-changing route of every family (the handler behind it does not matter: the guard answers first).
ROUTES = [
    ("POST", "/tool/list_pets"),
    ("POST", "/decide"),
    ("POST", "/grants"),
    ("DELETE", "/grants/abc"),
    ("POST", "/halts"),
    ("POST", "/halts/abc/resume"),
    ("POST", "/approvals/abc/approve"),
    ("POST", "/approvals/abc/deny"),
    ("PUT", "/approvals/settings"),
    ("POST", "/approvals/precedents/forget"),
    ("PUT", "/policies/claude/tools/list_pets"),
    ("PUT", "/policy-files/agents"),
    ("POST", "/tools/pins/accept"),
    ("POST", "/rpc"),
    ("POST", "/memory/snapshot_reminder"),
    ("POST", "/messages"),
    ("POST", "/mcp"),
    ("DELETE", "/mcp"),
]


@pytest.fixture
async def client(tmp_path: Path, backend: Backend) -> AsyncIterator[httpx.AsyncClient]:
    cfg = make_config(tmp_path, backend, f"auth: {{admin_token: adm1n}}\nconsole: {{allowed_origins: ['{LISTED}']}}")
    # memory's routes are guarded too, so memory is on
    cfg.write_text(cfg.read_text().replace("memory: {enabled: false}", "memory: {enabled: true, hybrid: false}"))
    async with (
        in_process(Mesh(load_settings(cfg, env={}))) as transport,
        httpx.AsyncClient(transport=transport, base_url=BASE, timeout=30) as c,
    ):
        yield c


def refused(r: httpx.Response, path: str) -> bool:
    if r.status_code != 403:
        return False
    body = r.json()
    if path in ("/mcp", "/rpc", "/messages"):  # JSON-RPC routes answer in JSON-RPC's shape
        return body["error"]["code"] == -32600 and body["error"]["message"].startswith("Forbidden: ")
    return set(body) == {"error"}


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
async def test_every_state_changing_route_refuses_another_sites_page(client: httpx.AsyncClient, site: str) -> None:
    for method, path in ROUTES:
        for origin in ({"Origin": "http://127.0.0.1:5555"}, {"Origin": "http://localhost:9090"}, {}):
            headers = {**ADMIN, **JSON, "Sec-Fetch-Site": site, **origin}
            r = await client.request(method, path, content=b"{}", headers=headers)
            assert refused(r, path), (method, path, origin, r.status_code, r.text)
    r = await client.post("/grants", content=b"{}", headers={**ADMIN, "Sec-Fetch-Site": site})
    assert r.json() == {
        "error": f"cross-site request refused (Sec-Fetch-Site: {site}); list the origin in console.allowed_origins"
    }


STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
# OAuth's endpoints for clients that are not browsers act on no ambient credential (functions/csrf.py): the only
# writes a request from another site reaches. The consent (approve, deny) is refused like every other write.
NON_BROWSER = {("POST", "/oauth/register"), ("POST", "/oauth/token"), ("POST", "/oauth/revoke")}


def app_routes(tmp_path: Path, backend: Backend) -> list[tuple[str, str, bool]]:
    """Every (method, path, control plane?) the flux7 app serves, path parameters filled in: the list the two
    tests below walk, so a route added later is covered without anyone remembering to list it."""
    (tmp_path / "routes").mkdir(exist_ok=True)
    cfg = make_config(tmp_path / "routes", backend, "auth: {admin_token: adm1n}")
    mesh = Mesh(load_settings(cfg, env={}))
    out: list[tuple[str, str, bool]] = []
    try:
        for route in create_app(mesh).routes:
            for handler in getattr(route, "route_handlers", []):
                guarded = bool({control_plane, resolvers, grantors, owners, readers} & set(handler.guards or []))
                # a parameter filled with a value of its type, so the router reaches the guards
                path = re.sub(r"\{[^}]+\}", "x", re.sub(r"\{[^}:]+:int\}", "1", route.path))
                out += [(method, path, guarded) for method in sorted(getattr(handler, "http_methods", ()))]
    finally:
        mesh.db.close()
    return out


async def test_every_route_the_app_serves_refuses_a_cross_site_write(
    client: httpx.AsyncClient, tmp_path: Path, backend: Backend
) -> None:
    writes = [(m, p) for m, p, _ in app_routes(tmp_path, backend) if m in STATE_CHANGING]
    assert {("POST", "/tokens"), ("POST", "/governance/replay"), ("POST", "/decide/x/outcome")} <= set(writes)
    consent = {("POST", "/oauth/requests/x/approve"), ("POST", "/oauth/requests/x/deny")}
    assert NON_BROWSER | consent <= set(writes)
    hostile = {**ADMIN, **JSON, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
    for method, path in writes:
        r = await client.request(method, path, content=b"{}", headers=hostile)
        if (method, path) in NON_BROWSER:  # answered as OAuth answers them (here: a bad request)
            assert r.status_code == 400 and "error_description" in r.json(), (path, r.text)
            continue
        assert refused(r, path), (method, path, r.status_code, r.text)


async def test_every_control_plane_route_refuses_a_caller_without_the_admin_token(
    client: httpx.AsyncClient, tmp_path: Path, backend: Backend
) -> None:
    guarded = [(m, p) for m, p, cp in app_routes(tmp_path, backend) if cp and m != "HEAD"]
    assert len([1 for m, _ in guarded if m in STATE_CHANGING]) >= 20
    for method, path in guarded:
        for headers in ({}, {"Authorization": "Bearer agent:claude"}, {"Authorization": "Bearer wrong"}):
            body = b"{}" if method in STATE_CHANGING else None
            r = await client.request(method, path, content=body, headers={**JSON, **headers})
            assert r.status_code == 401, (method, path, headers, r.status_code, r.text)


async def test_a_foreign_origin_is_refused_even_without_sec_fetch_site(client: httpx.AsyncClient) -> None:
    for origin in ["http://127.0.0.1:5555", "http://localhost:9090", "https://evil.example", "null", "file://"]:
        for method, path in ROUTES:
            r = await client.request(method, path, content=b"{}", headers={**ADMIN, **JSON, "Origin": origin})
            assert refused(r, path), (origin, method, path, r.status_code)
    r = await client.post("/grants", json={}, headers={**ADMIN, "Origin": "https://evil.example"})
    assert r.json() == {"error": "origin not allowed: https://evil.example; list it in console.allowed_origins"}


async def test_the_servers_own_origin_a_listed_one_and_non_browsers_pass(client: httpx.AsyncClient) -> None:
    grant = {"agent": "claude", "tools": "list_*", "duration": "1m"}
    for headers in (
        {},  # curl, the SDKs, the CLIs: neither header
        {"Origin": BASE, "Sec-Fetch-Site": "same-origin"},  # the console served by this server
        {"Origin": BASE},
        {"Origin": LISTED, "Sec-Fetch-Site": "cross-site"},  # a console elsewhere, listed
        {"Sec-Fetch-Site": "none"},  # typed into the address bar
    ):
        r = await client.post("/grants", json=grant, headers={**ADMIN, **headers})
        assert r.status_code == 201, (headers, r.text)
    # reads are not the guard's business: a cross-site GET still needs the admin token, as before
    health = await client.get("/health", headers={"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
    assert health.status_code == 200


async def test_a_dns_name_rebound_to_loopback_is_not_its_own_origin(client: httpx.AsyncClient) -> None:
    """Origin == Host is what a rebinding page sends too; from a loopback peer only addresses and localhost count."""
    rebound = {"Host": "evil.example:9090", "Origin": "http://evil.example:9090", "Sec-Fetch-Site": "same-origin"}
    r = await client.post("/grants", json={}, headers={**ADMIN, **rebound})
    assert r.status_code == 403
    local = {"Host": "localhost:9090", "Origin": "http://localhost:9090", "Sec-Fetch-Site": "same-origin"}
    assert (await client.post("/grants", json={}, headers={**ADMIN, **local})).status_code == 400  # past the guard


async def test_json_routes_want_a_json_body_and_bodyless_posts_pass(client: httpx.AsyncClient) -> None:
    body = b'{"params": {}}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""):
        headers = {**AGENT, "Content-Type": content_type} if content_type else AGENT
        r = await client.post("/tool/list_pets", content=body, headers=headers)
        assert (r.status_code, r.json()) == (415, {"error": "the body must be JSON (Content-Type: application/json)"})
    rpc = await client.post("/rpc", content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')
    assert rpc.status_code == 415 and rpc.json()["error"]["code"] == -32600
    for content_type in ("application/json", "application/json; charset=utf-8", "application/merge-patch+json"):
        r = await client.post("/tool/list_pets", content=body, headers={**AGENT, "Content-Type": content_type})
        assert r.status_code == 200, (content_type, r.text)
    # approve/deny/resume with no body at all (the SDK's approve() posts none): past the guard, to the handler
    for path in ("/approvals/nope/approve", "/halts/nope/resume"):
        r = await client.post(path, headers=ADMIN)
        assert r.status_code == 404, (path, r.text)
    # a policy file's YAML is text, not JSON
    yaml_body = b"name: agents\nrules: [{tools: ['*'], action: allow}]\n"
    r = await client.put("/policy-files/agents", content=yaml_body, headers={**ADMIN, "Content-Type": "text/yaml"})
    assert r.status_code == 200, r.text


async def test_cors_answers_only_when_console_cors_is_on(tmp_path: Path, backend: Backend) -> None:
    preflight = {
        "Origin": LISTED,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }

    async def ask(extra: str) -> httpx.Response:
        cfg = make_config(tmp_path, backend, f"auth: {{admin_token: adm1n}}\n{extra}")
        async with (
            in_process(Mesh(load_settings(cfg, env={}))) as transport,
            httpx.AsyncClient(transport=transport, base_url=BASE) as c,
        ):
            return await c.options("/grants", headers=preflight)

    listed_only = await ask(f"console: {{allowed_origins: ['{LISTED}']}}")
    assert "access-control-allow-origin" not in listed_only.headers
    with_cors = await ask(f"console: {{allowed_origins: ['{LISTED}'], cors: true}}")
    assert with_cors.status_code in (200, 204) and with_cors.headers["access-control-allow-origin"] == LISTED
    with pytest.raises(ConfigError, match=r"console\.cors"):
        load_settings(make_config(tmp_path, backend, "console: {cors: true}"), env={})


async def test_mem7_serve_has_the_guard_too(tmp_path: Path) -> None:
    from flux7.shared.memory.config import MemoryConfig
    from flux7.shared.store.db import Database

    service = MemoryService(MemoryConfig(dir=str(tmp_path), hybrid=False), Database(tmp_path / "index.db"))
    app = create_memory_app(service)
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    transport = httpx.ASGITransport(app, client=("127.0.0.1", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
        page: dict[str, Any] = {"Origin": "http://127.0.0.1:5555", "Sec-Fetch-Site": "same-site", **JSON}
        assert (await c.post("/rpc", content=ping, headers=page)).status_code == 403
        assert (await c.post("/rpc", content=ping, headers={"Content-Type": "text/plain"})).status_code == 415
        assert (await c.post("/rpc", content=ping, headers=JSON)).status_code == 200
    service.close()
