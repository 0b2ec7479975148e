"""The official MCP SDKs' OAuth clients connect to a real `flux7 serve` as a managed agent would: discovery from
/mcp's 401, dynamic registration, authorization with PKCE, a named human's consent, tokens, governed calls traced
under the consented agent id, a refresh once the access token expired, and a 401 once the connection is revoked.

The test plays the browser and the human: it follows the SDK's authorization URL to the console's consent page,
approves (or denies) through the consent API with the admin token, and follows the redirect to the client's own
loopback callback (a real HTTP server: the TypeScript client's in Node, a small one here for the Python client)."""

from __future__ import annotations

import json
import queue
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.notify.smtp import self_signed
from tests.support.http import free_port, serve_json
from tests.support.mesh import pets_mesh_config
from tests.support.oauth import ADMIN, query_of
from tests.support.server import REPO, Server, running_server
from tests.support.waiting import eventually, wait_until
from tests.upstreams.servers.http_backend import running_backend

pytestmark = pytest.mark.served

TS = REPO / "tests" / "mcp_ts"
SECONDS = 3  # oauth.access_token_seconds: short, so the tests see tokens expire and get refreshed
POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["list_pets"]
    action: allow
  - tools: ["delete_pet"]
    action: human_approval
  - tools: ["*"]
    action: deny
"""


class Site:
    """A client's website over HTTPS on loopback, publishing its Client ID Metadata Document (`answer`)."""

    def __init__(self, base: str, ca_file: Path) -> None:
        self.base, self.ca_file = base, ca_file
        self.answer: tuple[int, Any] = (404, {})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    cert, key = self_signed(tmp_path_factory.mktemp("client-site"))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    box: list[Site] = []
    with serve_json(lambda *_: box[0].answer, tls=tls) as (url, _):
        box.append(Site(url, cert))
        yield box[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, module_database_url: str, site: Site) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("oauth-clients")
    # Claims and anonymous calls refused even on loopback, as off it: the 401 is what starts an OAuth client.
    # Client metadata documents may come from loopback here, and the site's certificate is trusted.
    extra = "auth: {admin_token: adm1n, allow_claimed_identity: false}\n"
    extra += f"oauth: {{access_token_seconds: {SECONDS}, client_metadata_networks: [127.0.0.0/8], "
    extra += f"client_metadata_ca_file: '{site.ca_file}'}}"
    if module_database_url:
        extra += f"\ndatabase: {module_database_url}"
    with running_backend() as backend:
        config = pets_mesh_config(tmp, backend, POLICY, admin_token=None, extra=extra)
        with running_server(config) as s:
            yield s


@dataclass
class Human:
    """The browser and the human at the console: what they saw, and what they decide next."""

    server: Server
    decisions: list[str] = field(default_factory=list)  # "approve:<agent>" or "deny", in order
    seen: list[dict[str, Any]] = field(default_factory=list)  # the consent requests, as the page showed them

    def authorize(self, url: str, *, follow: bool = True) -> dict[str, Any]:
        """Follow an authorization URL to the consent page, decide, and follow the answer to the client."""
        with httpx.Client(trust_env=False, timeout=30) as browser:
            r = browser.get(url, follow_redirects=False)
            assert r.status_code == 302, r.text
            console = r.headers["location"]
            assert console.startswith(f"{self.server.url}/console/#/oauth/consent?request="), console
            request_id = console.rsplit("=", 1)[1]
            self.seen.append(browser.get(f"{self.server.url}/oauth/requests/{request_id}", headers=ADMIN).json())
            decision, _, agent = self.decisions.pop(0).partition(":")
            body = {"agent": agent} if agent else {}
            r = browser.post(f"{self.server.url}/oauth/requests/{request_id}/{decision}", json=body, headers=ADMIN)
            assert r.status_code == 200, r.text
            redirect_to = r.json()["redirect_to"]
            if follow:
                assert browser.get(redirect_to).status_code == 200  # the client's loopback callback
            return query_of(redirect_to)


def connections(server: Server) -> list[dict[str, Any]]:
    return list(httpx.get(f"{server.url}/oauth/tokens", headers=ADMIN, trust_env=False).json())


def traced_tools(server: Server, agent: str) -> list[str]:
    traces = httpx.get(f"{server.url}/traces", params={"agent": agent}, headers=ADMIN, trust_env=False).json()
    return [t["tool"] for t in traces]


def mcp_status(server: Server, access_token: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    headers = {"Authorization": f"Bearer {access_token}"}
    return httpx.post(f"{server.url}/mcp", json=body, headers=headers, trust_env=False, timeout=30)


def wait_for_expiry(token: OAuthToken | dict[str, Any], issued_at: float) -> None:
    expires_in = token.expires_in if isinstance(token, OAuthToken) else token["expires_in"]
    deadline = issued_at + float(expires_in or SECONDS)
    wait_until(lambda: time.time() > deadline + 0.5, SECONDS + 10, "the access token to expire")


# --- the Python SDK -----------------------------------------------------------------------------------------------


class MemoryStorage:
    """The SDK's TokenStorage, in memory; every token set kept, to see refreshes."""

    def __init__(self) -> None:
        self.tokens: list[OAuthToken] = []
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens[-1] if self.tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def test_the_python_sdk_connects_by_oauth_and_is_governed_as_the_consented_agent(server: Server) -> None:
    human = Human(server, decisions=["approve:py-connector", "deny"])
    storage = MemoryStorage()
    with serve_json(lambda *_: (200, {"ok": True})) as (callback, hits):
        answers: list[dict[str, str]] = []

        async def redirect_handler(url: str) -> None:
            answers.append(human.authorize(url))

        async def callback_handler() -> AuthorizationCodeResult:
            await eventually(lambda: len(hits) == len(answers), 30, "the browser at the callback")
            answer = answers[-1]
            if "code" not in answer:
                raise PermissionError(f"authorization refused: {answer['error']}")
            return AuthorizationCodeResult(code=answer["code"], state=answer["state"], iss=answer["iss"])

        provider = OAuthClientProvider(
            server_url=f"{server.url}/mcp",
            client_metadata=OAuthClientMetadata(
                client_name="flux7 Python SDK test",
                redirect_uris=[f"{callback}/callback"],  # type: ignore[list-item]
                grant_types=["authorization_code", "refresh_token"],
            ),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )
        http = httpx2.AsyncClient(auth=provider, timeout=30)
        async with http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
            # discovery, registration, consent and tokens happened on the first request
            [page] = human.seen
            assert page["client"]["client_name"] == "flux7 Python SDK test" and page["state"] == "pending"
            assert (
                page["proposed_agent"] == "flux7-python-sdk-test" and page["redirect_host"] == urlsplit(callback).netloc
            )
            assert storage.client is not None and storage.client.client_id.startswith("f7c_")
            assert answers[0]["iss"] == server.url and hits[0]["path"].startswith("/callback?code=")
            assert "list_pets" in {t.name for t in (await client.list_tools()).tools}
            issued = time.time()
            first = storage.tokens[-1]
            assert first.access_token.startswith("f7o_") and first.scope == "mcp"
            allowed = await client.call_tool("list_pets", {})
            held = await client.call_tool("delete_pet", {"petId": 3})
            assert allowed.is_error is False
            assert held.is_error is True and "Approval required" in held.content[0].text  # type: ignore[union-attr]
            assert {"list_pets", "delete_pet"} <= set(traced_tools(server, "py-connector"))
            pending = httpx.get(f"{server.url}/approvals", headers=ADMIN, trust_env=False).json()
            assert [a["agent_id"] for a in pending if a["tool"] == "delete_pet"] == ["py-connector"]

            # the access token expires: the SDK refreshes (rotating the refresh token) and goes on
            wait_for_expiry(first, issued)
            expired = mcp_status(server, first.access_token)
            assert expired.status_code == 401 and 'error="invalid_token"' in expired.headers["www-authenticate"]
            assert (await client.call_tool("list_pets", {})).is_error is False
            renewed = storage.tokens[-1]
            assert renewed.access_token != first.access_token and renewed.refresh_token != first.refresh_token
            [connection] = connections(server)
            assert connection["agent_id"] == "py-connector" and connection["granted_by"] == "owner:admin-token"
            assert connection["state"] == "active" and connection["last_used_at"] is not None

            # revoked on the console: the tokens are 401 at once
            r = httpx.delete(f"{server.url}/oauth/tokens/{connection['id']}", headers=ADMIN, trust_env=False)
            assert r.status_code == 200
            assert mcp_status(server, renewed.access_token).status_code == 401

        # The SDK connects again: its tokens refused, it asks for a consent again, and the human says no.
        http = httpx2.AsyncClient(auth=provider, timeout=30)
        with pytest.raises(BaseException) as refused:
            async with http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
                await client.list_tools()
        assert any(isinstance(e, PermissionError) for e in leaves(refused.value)), refused.value
        assert answers[-1]["error"] == "access_denied" and len(human.seen) == 2
        assert len(connections(server)) == 1  # nothing was granted


async def test_the_python_sdk_connects_by_its_client_metadata_document(server: Server, site: Site) -> None:
    """A client that publishes its metadata (Client ID Metadata Documents, the MCP spec of 2025-11-25) does not
    register: the SDK sees `client_id_metadata_document_supported`, sends its document's URL as client_id, flux7
    fetches the document, the human approves what it names, and the connection is governed as the agent chosen."""
    human = Human(server, decisions=["approve:py-cimd"])
    storage = MemoryStorage()
    document_url = f"{site.base}/oauth/flux7-sdk-test.json"
    with serve_json(lambda *_: (200, {"ok": True})) as (callback, hits):
        site.answer = (
            200,
            {
                "client_id": document_url,
                "client_name": "flux7 CIMD test",
                "redirect_uris": [f"{callback}/callback"],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            },
        )
        answers: list[dict[str, str]] = []

        async def redirect_handler(url: str) -> None:
            answers.append(human.authorize(url))

        async def callback_handler() -> AuthorizationCodeResult:
            await eventually(lambda: len(hits) == len(answers), 30, "the browser at the callback")
            answer = answers[-1]
            return AuthorizationCodeResult(code=answer["code"], state=answer["state"], iss=answer["iss"])

        provider = OAuthClientProvider(
            server_url=f"{server.url}/mcp",
            client_metadata=OAuthClientMetadata(
                client_name="flux7 CIMD test",
                redirect_uris=[f"{callback}/callback"],  # type: ignore[list-item]
                grant_types=["authorization_code", "refresh_token"],
                token_endpoint_auth_method="none",
            ),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
            client_metadata_url=document_url,
        )
        http = httpx2.AsyncClient(auth=provider, timeout=30)
        async with http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http)) as client:
            [page] = human.seen
            assert page["client"]["client_id"] == document_url  # the consent page names where it is published
            assert page["client"]["client_name"] == "flux7 CIMD test" and page["proposed_agent"] == "flux7-cimd-test"
            assert storage.client is not None and storage.client.client_id == document_url
            assert (await client.call_tool("list_pets", {})).is_error is False
            assert "list_pets" in traced_tools(server, "py-cimd")
    mine = [c for c in connections(server) if c["client_id"] == document_url]
    assert [(c["agent_id"], c["state"]) for c in mine] == [("py-cimd", "active")]
    registered = httpx.get(f"{server.url}/oauth/clients", headers=ADMIN, trust_env=False).json()
    assert not [c for c in registered if c["client_name"] == "flux7 CIMD test" and c["client_id"] != document_url]


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for e in error.exceptions for leaf in leaves(e)]
    return [error]


# --- the TypeScript SDK ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> str:
    exe, npm = shutil.which("node"), shutil.which("npm")
    assert exe and npm, "Node.js and npm are needed for the TypeScript SDK client test"
    if not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=TS, capture_output=True, text=True
        )
        assert done.returncode == 0, f"npm ci in {TS} failed:\n{done.stdout}\n{done.stderr}"
    return exe


class NodeClient:
    """tests/mcp_ts/oauth_client.mjs as a process: its lines out, the test's go-aheads in."""

    def __init__(self, node: str, mcp_url: str, port: int = 0, metadata_url: str = "") -> None:
        self.proc = subprocess.Popen(
            [
                node,
                str(TS / "oauth_client.mjs"),
                mcp_url,
                str(port or free_port()),
                *([metadata_url] if metadata_url else []),
            ],
            cwd=TS,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def next(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.lines.get(timeout=60)))
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(
                f"the TypeScript client said nothing: {self.proc.stderr.read() if self.proc.stderr else ''}"
            ) from None

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("next\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_the_typescript_sdk_connects_by_oauth_refreshes_and_is_cut_off(server: Server, node: str) -> None:
    human = Human(server, decisions=["approve:ts-connector", "deny"])
    ts = NodeClient(node, f"{server.url}/mcp")
    try:
        authorize = ts.next()["authorize"]
        assert authorize.startswith(f"{server.url}/oauth/authorize?")
        params = query_of(authorize)
        assert params["code_challenge_method"] == "S256" and params["resource"] == f"{server.url}/mcp"
        human.authorize(authorize)
        connected = ts.next()
        assert connected["step"] == "connected", connected
        assert connected["callback"]["iss"] == server.url and "list_pets" in connected["tools"]
        assert connected["result"]["content"] and not connected["result"].get("isError"), connected["result"]
        assert connected["tokens"]["scope"] == "mcp" and connected["tokens"]["refresh_token"].startswith("f7r_")
        issued = time.time()
        assert "list_pets" in traced_tools(server, "ts-connector")
        ts_connection = next(c for c in connections(server) if c["client_id"] == connected["client_id"])
        assert ts_connection["agent_id"] == "ts-connector"

        wait_for_expiry(connected["tokens"], issued)
        ts.go()
        refreshed = ts.next()
        assert refreshed["step"] == "refreshed" and refreshed["result"]["content"], refreshed
        assert not refreshed["result"].get("isError"), refreshed
        assert refreshed["issued"] == 2 and refreshed["tokens"]["access_token"] != connected["tokens"]["access_token"]
        assert refreshed["tokens"]["refresh_token"] != connected["tokens"]["refresh_token"]

        r = httpx.delete(f"{server.url}/oauth/tokens/{ts_connection['id']}", headers=ADMIN, trust_env=False)
        assert r.status_code == 200 and r.json()["state"] == "revoked"
        assert mcp_status(server, refreshed["tokens"]["access_token"]).status_code == 401
        ts.go()
        again = ts.next()  # its refresh refused, the SDK asks a human again
        assert again["authorize"].startswith(f"{server.url}/oauth/authorize?")
        revoked = ts.next()
        assert revoked["step"] == "revoked" and "thrown" in revoked["result"], revoked
        denied = human.authorize(again["authorize"], follow=False)  # the client has gone; the human says no
        assert denied["error"] == "access_denied"
    finally:
        ts.close()


def test_the_typescript_sdk_connects_by_its_client_metadata_document(server: Server, site: Site, node: str) -> None:
    """The TypeScript SDK given `clientMetadataUrl`: no registration, its document's URL is its client id."""
    human = Human(server, decisions=["approve:ts-cimd"])
    port = free_port()
    document_url = f"{site.base}/oauth/flux7-ts-sdk-test.json"
    site.answer = (
        200,
        {
            "client_id": document_url,
            "client_name": "flux7 TS CIMD test",
            "redirect_uris": [f"http://127.0.0.1:{port}/callback"],
            "token_endpoint_auth_method": "none",
        },
    )
    ts = NodeClient(node, f"{server.url}/mcp", port, document_url)
    try:
        authorize = ts.next()["authorize"]
        assert query_of(authorize)["client_id"] == document_url
        human.authorize(authorize)
        connected = ts.next()
        assert connected["step"] == "connected" and connected["client_id"] == document_url, connected
        assert not connected["result"].get("isError"), connected["result"]
        assert human.seen[0]["client"]["client_name"] == "flux7 TS CIMD test"
        assert "list_pets" in traced_tools(server, "ts-cimd")
    finally:
        ts.close()
