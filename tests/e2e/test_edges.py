"""Bad input at every edge: JSON nested too deep is a clear 400 / -32700 on every JSON entry point (REST, /decide,
/mcp, /rpc, both stdio servers), and every GET route answers HEAD (the console and mem7's routes included)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.shared.json_depth import MAX_JSON_DEPTH, too_deep
from flux7.shared.memory.stdio import serve_stdio
from tests.functions.conftest import ADMIN, AGENT
from tests.mcp_server.conftest import write_config
from tests.mcp_server.test_stdio import env, mesh7_args
from tests.support.http import free_port
from tests.support.mesh import pets_mesh_config
from tests.support.server import running_server
from tests.upstreams.servers.http_backend import running_backend

pytestmark = pytest.mark.served

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels"
JSON_AGENT = {**AGENT, "Content-Type": "application/json"}  # JSON routes refuse other content types (415)
MCP_HEADERS = {**JSON_AGENT, "Accept": "application/json, text/event-stream"}


POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["list_pets"]
    action: allow
"""


class Client:
    """A tiny sync client for one real `flux7 serve` (a fresh connection per request)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __getattr__(self, method: str) -> Any:
        def send(path: str, **kw: Any) -> httpx.Response:
            return httpx.request(method.upper(), self.url + path, timeout=60, trust_env=False, **kw)

        return send


# One real `flux7 serve` (granian) for the module: what HEAD and a deep body meet in production.
@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, module_database_url: str) -> Iterator[Client]:
    tmp = tmp_path_factory.mktemp("edges")
    with running_backend() as backend:
        database = f"database: {module_database_url}" if module_database_url else ""
        config = pets_mesh_config(
            tmp, backend, POLICY, memory="{enabled: true, hybrid: false, token: m3m}", extra=database
        )
        with running_server(config) as server:
            yield Client(server.url)


def nested(depth: int) -> Any:
    """Arguments `{"params": {"v": [[...]]}}` whose whole body nests exactly `depth` levels."""
    value: Any = 1
    for _ in range(depth - 2):
        value = [value]
    return {"params": {"v": value}}


def test_the_depth_scan_counts_structure_not_text() -> None:
    assert not too_deep(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH)
    assert too_deep(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1))
    assert too_deep(DEEP) and too_deep(DEEP_OBJECT) and too_deep(DEEP.decode())
    # brackets inside strings, escaped quotes included, are text
    assert not too_deep(b'{"a": "' + b"[" * 5000 + b'\\"' + b"{" * 5000 + b'"}')
    # wide is not deep: many brackets side by side
    assert not too_deep(b"[" + b",".join([b'{"a":[1,{"b":2}]}'] * 20_000) + b"]")
    assert len(json.dumps(nested(MAX_JSON_DEPTH))) and not too_deep(json.dumps(nested(MAX_JSON_DEPTH)))
    assert too_deep(json.dumps(nested(MAX_JSON_DEPTH + 1)))


def test_rest_and_decide_answer_400_saying_why(client: Client) -> None:
    for body in (DEEP, DEEP_OBJECT, json.dumps(nested(MAX_JSON_DEPTH + 1)).encode()):
        r = client.post("/tool/list_pets", content=body, headers=JSON_AGENT)
        assert r.status_code == 400
        assert r.json() == {
            "error": f"invalid JSON body: {TOO_DEEP}",
            "policy": "error",
            "trace_id": "",
            "latency_ms": 0,
        }
        d = client.post("/decide", content=body, headers=JSON_AGENT)
        assert (d.status_code, d.json()) == (400, {"error": f"invalid JSON body: {TOO_DEEP}"})
    # at the limit the call goes through the pipeline (list_pets is allowed and forwarded)
    ok = client.post("/tool/list_pets", content=json.dumps(nested(MAX_JSON_DEPTH)), headers=JSON_AGENT)
    assert ok.status_code == 200 and ok.json()["policy"] == "allow"
    assert client.post("/decide", json={"tool": "list_pets", "arguments": {}}, headers=AGENT).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/approvals/abc/approve"),
        ("post", "/approvals/abc/deny"),
        ("put", "/approvals/settings"),
        ("post", "/grants"),
        ("post", "/halts"),
        ("post", "/halts/abc/resume"),
        ("post", "/approvals/precedents/forget"),
        ("put", "/policies/claude/tools/list_pets"),
        ("put", "/policy-files/x.yaml"),
    ],
)
def test_control_plane_json_bodies_answer_400_saying_why(client: Client, method: str, path: str) -> None:
    headers = {**ADMIN, "Content-Type": "application/json"}
    r = getattr(client, method)(path, content=DEEP_OBJECT, headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == f"invalid JSON body: {TOO_DEEP}"


def test_mcp_answers_a_parse_error_saying_why(client: Client) -> None:
    for body in (DEEP, DEEP_OBJECT):
        r = client.post("/mcp", content=body, headers=MCP_HEADERS)
        assert r.status_code == 400
        assert r.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": f"Parse error: JSON {TOO_DEEP}"},
        }
    plain = client.post("/mcp", content=b"{nope", headers=MCP_HEADERS)  # the plain parse error is unchanged
    assert plain.json()["error"] == {"code": -32700, "message": "Parse error"}


def test_mesh_stdio_answers_a_parse_error_saying_why(tmp_path: Path) -> None:
    config = write_config(tmp_path, mcp=False)
    lines = [DEEP.decode(), "this is not json", json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"})]
    proc = subprocess.run(
        [sys.executable, *mesh7_args(config, free_port(), "--mcp-session-id", "fixed-session")],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env=env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert out[0] == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": f"Parse error: JSON {TOO_DEEP}"},
    }
    assert out[1]["error"] == {"code": -32700, "message": "Parse error"}
    assert out[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_mem7_rpc_and_stdio_answer_a_parse_error_saying_why(client: Client, tmp_path: Path) -> None:
    from flux7.shared.memory.config import MemoryConfig
    from flux7.shared.memory.service import MemoryService
    from flux7.shared.store.db import Database

    expected = {"jsonrpc": "2.0", "error": {"code": -32700, "message": f"parse error: JSON {TOO_DEEP}"}}
    r = client.post(
        "/rpc", content=DEEP_OBJECT, headers={"Authorization": "Bearer m3m", "Content-Type": "application/json"}
    )
    assert (r.status_code, r.json()) == (200, expected)
    root = tmp_path / "mem7"
    service = MemoryService(MemoryConfig(dir=str(root), hybrid=False), Database(root / "index.db"))
    stdout = io.BytesIO()
    listing = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode()
    serve_stdio(service, io.BytesIO(DEEP + b"\n" + listing + b"\n"), stdout)
    service.close()
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert answers[0] == expected
    assert answers[1]["id"] == 3 and "tools" in answers[1]["result"]


GET_ROUTES = [
    "/health",
    "/version",
    "/tools",
    "/mcp-servers",
    "/tools/decisions?agent=claude",
    "/policies",
    "/policy-files",
    "/traces",
    "/traces/verify",
    "/otel-traces",
    "/sessions",
    "/metrics",
    "/approvals",
    "/approvals/settings",
    "/approvals/precedents",
    "/approvals/decisions",
    "/grants",
    "/halts",
    "/tools/pins",
    "/console/",
    "/console",
    "/console/index.html",
    "/healthz",
    "/memory/chain",
]


# bodies that do not change between two requests (others carry timings or counts)
STABLE = {"/tools", "/policies", "/console/", "/console", "/console/index.html", "/healthz", "/mcp-servers"}


@pytest.mark.parametrize("path", GET_ROUTES)
def test_every_get_route_answers_head_with_the_get_headers_and_no_body(client: Client, path: str) -> None:
    auth = {"Authorization": "Bearer m3m"} if path.startswith("/memory") else ADMIN
    get = client.get(path, headers=auth)
    head = client.head(path, headers=auth)
    assert get.status_code == (501 if path == "/tools/pins" else 200), (path, get.text[:200])  # pin_tools off
    assert head.status_code == get.status_code and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    if "content-length" in get.headers:  # the length GET's body has (RFC 9110 9.3.2)
        assert int(head.headers["content-length"]) > 0
        if path in STABLE:
            assert head.headers["content-length"] == get.headers["content-length"]


def test_head_follows_get_on_refusals(client: Client) -> None:
    # no GET, no HEAD: the same 405 and Allow header; unknown paths 404; the control plane still wants a token
    post_only = client.head("/tool/list_pets", headers=AGENT)
    assert post_only.status_code == 405 and post_only.content == b""
    assert post_only.headers["allow"] == client.get("/tool/list_pets", headers=AGENT).headers["allow"]
    assert client.head("/no/such/route").status_code == 404
    assert client.head("/metrics").status_code == 401
    assert client.head("/approvals/nope", headers=ADMIN).status_code == 404


def test_head_on_a_stream_answers_the_head_and_ends(client: Client) -> None:
    # GET /sse streams until the client leaves; HEAD gets its status and headers and the stream stops
    head = client.head("/sse", headers={"Authorization": "Bearer m3m"})
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"].startswith("text/event-stream")
