from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from tests.functions.conftest import ADMIN, AGENT
from tests.upstreams.servers.http_backend import Backend

JSON = {"Content-Type": "application/json"}


def traces(client: TestClient[Any], **q: str) -> list[dict[str, Any]]:
    r = client.get("/traces", params=q, headers=ADMIN)
    assert r.status_code == 200
    return r.json()  # type: ignore[no-any-return]


def test_allowed_call_is_forwarded_traced_and_echoes_the_trace_id(client: TestClient[Any], backend: Backend) -> None:
    r = client.post("/tool/list_pets", json={"params": {"limit": 2}}, headers=AGENT)
    assert r.status_code == 200
    body = r.json()
    assert body["policy"] == "allow"
    assert body["result"]["pets"][0]["name"] == "Rex"
    assert r.headers["x-trace-id"] == body["trace_id"] and len(body["trace_id"]) == 32
    assert backend.requests[-1].query == {"limit": ["2"]}
    [t] = traces(client, trace=body["trace_id"])
    assert (t["agent_id"], t["tool"], t["policy"], t["policy_rule"], t["status_code"]) == (
        "claude",
        "list_pets",
        "allow",
        "agents",
        200,
    )
    assert t["params"] == {"limit": 2}


def test_a_body_without_params_is_taken_whole_as_the_arguments(client: TestClient[Any], backend: Backend) -> None:
    # DESIGN decision 1: the published SDK sends the arguments unwrapped.
    r = client.post("/tool/get_pet_by_id", json={"petId": "1"}, headers=AGENT)
    assert r.status_code == 200 and r.json()["result"] == {"id": 1, "name": "Rex"}
    assert backend.requests[-1].path == "/pets/1"


def test_denied_call_is_traced_and_returns_403(client: TestClient[Any], backend: Backend) -> None:
    seen = len(backend.requests)
    r = client.post("/tool/delete_pet", json={"params": {"petId": "1"}}, headers=AGENT)
    assert r.status_code == 403
    body = r.json()
    assert body["policy"] == "deny" and body["error"] == "policy=agents tool=delete_pet action=deny"
    assert len(backend.requests) == seen  # never forwarded
    [t] = traces(client, trace=body["trace_id"])
    assert t["policy"] == "deny" and t["status_code"] == 403


def test_condition_denies_only_matching_arguments(client: TestClient[Any]) -> None:
    assert client.post("/tool/get_pet_by_id", json={"params": {"petId": "2"}}, headers=AGENT).status_code == 403
    assert client.post("/tool/get_pet_by_id", json={"params": {"petId": "1"}}, headers=AGENT).status_code == 200


def test_unknown_tool_is_404_and_not_traced(client: TestClient[Any]) -> None:
    before = len(traces(client))
    r = client.post("/tool/nope", json={}, headers=AGENT)
    assert r.status_code == 404 and r.json() == {"error": "unknown tool: nope", "policy": "error"}
    assert len(traces(client)) == before


def test_malformed_json_is_400_with_the_contract_body(client: TestClient[Any]) -> None:
    r = client.post("/tool/list_pets", content=b"{not json", headers={**AGENT, **JSON})
    assert r.status_code == 400
    assert r.json() == {"error": "invalid JSON body", "policy": "error", "trace_id": "", "latency_ms": 0}
    r = client.post("/tool/list_pets", json={"params": "x"}, headers=AGENT)
    assert r.status_code == 400 and "params" in r.json()["error"]


def test_oversized_body_is_413(tmp_path: Path, backend: Backend) -> None:
    from flux7.functions.app import create_app
    from flux7.shared.mesh import Mesh
    from flux7.shared.settings import load_settings
    from tests.functions.conftest import make_config

    cfg = make_config(tmp_path, backend, "max_body_bytes: 1024")
    with TestClient(create_app(Mesh(load_settings(cfg, env={})))) as c:
        r = c.post("/tool/list_pets", content=json.dumps({"x": "y" * 5000}).encode(), headers={**AGENT, **JSON})
        assert r.status_code == 413
        assert "error" in r.json()


def test_backend_error_is_502_with_status_in_the_trace(client: TestClient[Any]) -> None:
    r = client.post("/tool/get_boom", json={}, headers=AGENT)
    assert r.status_code == 502
    body = r.json()
    assert body["policy"] == "allow" and body["error"]
    [t] = traces(client, trace=body["trace_id"])
    assert t["status_code"] in (500, 502)


def test_caller_trace_context_reaches_the_backend(client: TestClient[Any]) -> None:
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    r = client.post("/tool/echo_headers", json={}, headers={**AGENT, "traceparent": tp, "x-session-id": "s1"})
    body = r.json()
    assert body["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert body["result"]["x_trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert body["result"]["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    [t] = traces(client, trace=body["trace_id"])
    assert t["parent_span_id"] == "b7ad6b7169203331" and t["session_id"] == "s1"


def test_decide_answers_without_forwarding(client: TestClient[Any], backend: Backend) -> None:
    seen = len(backend.requests)
    r = client.post("/decide", json={"tool": "list_pets", "arguments": {}}, headers=AGENT)
    assert r.status_code == 200
    body = r.json()
    assert (body["action"], body["rule"], body["agent"], body["tool"]) == (
        "allow",
        "agents",
        "claude",
        "list_pets",
    )
    r = client.post("/decide", json={"tool": "delete_pet", "arguments": {}}, headers=AGENT)
    assert r.status_code == 403 and r.json()["action"] == "deny"
    r = client.post("/decide", json={"tool": "create_pet", "arguments": {}}, headers=AGENT)
    assert r.status_code == 200 and r.json()["action"] == "human_approval"
    # a tool the caller runs itself (not registered) is decided by policy alone
    r = client.post("/decide", json={"tool": "local.thing", "arguments": {}}, headers=AGENT)
    assert r.status_code == 403 and r.json()["rule"] == "default"
    assert len(backend.requests) == seen


def test_decide_bad_input(client: TestClient[Any]) -> None:
    assert client.post("/decide", json={"arguments": {}}, headers=AGENT).json() == {"error": "tool field required"}
    r = client.post("/decide", content=b"[", headers={**AGENT, **JSON})
    assert r.status_code == 400 and r.json() == {"error": "invalid JSON body"}


def test_decide_refuses_impersonation_without_control_plane_rights(client: TestClient[Any]) -> None:
    r = client.post("/decide", json={"tool": "list_pets", "agent": "root-bot"}, headers=AGENT)
    assert r.status_code == 403
    r = client.post("/decide", json={"tool": "list_pets", "agent": "root-bot"}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["agent"] == "root-bot"


def test_tools_lists_the_registry_with_classification(client: TestClient[Any]) -> None:
    r = client.get("/tools", headers=AGENT)
    assert r.status_code == 200
    by_name = {t["name"]: t for t in r.json()}
    assert by_name["list_pets"]["method"] == "GET" and by_name["list_pets"]["source"] == "openapi"
    assert by_name["list_pets"]["classification"]["access"] == "read"
    assert by_name["delete_pet"]["classification"]["access"] == "write"
    assert client.get("/mcp-servers", headers=AGENT).json() == []


def test_tool_decisions_shows_the_effective_action(client: TestClient[Any]) -> None:
    assert client.get("/tools/decisions", headers=ADMIN).status_code == 400
    r = client.get("/tools/decisions", params={"agent": "claude"}, headers=ADMIN)
    by_name = {t["name"]: t for t in r.json()}
    assert by_name["delete_pet"]["action"] == "deny"
    assert by_name["create_pet"]["action"] == "human_approval"
    assert by_name["get_pet_by_id"]["conditional"] == [
        {"action": "deny", "rule": "agents", "field": "petId", "operator": "=="}
    ]


def test_health_and_version(client: TestClient[Any]) -> None:
    client.post("/tool/list_pets", json={}, headers=AGENT)
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["tools"] >= 7 and h["traces"]["total"] >= 1
    assert set(client.get("/version").json()) == {"version", "commit", "date"}


def test_control_plane_requires_the_admin_token(client: TestClient[Any]) -> None:
    r = client.get("/policies", headers=AGENT)
    assert r.status_code == 401 and r.json() == {"error": "control plane requires admin authorization"}
    assert client.get("/policies", headers=ADMIN).json()[0]["name"] == "agents"


def test_configured_openapi_headers_reach_the_backend(tmp_path: Path, backend: Backend) -> None:
    from flux7.functions.app import create_app
    from flux7.shared.mesh import Mesh
    from flux7.shared.settings import load_settings
    from tests.functions.conftest import make_config

    cfg = make_config(tmp_path, backend)
    cfg.write_text(
        cfg.read_text().replace(
            f"backend_url: {backend.url}", f"backend_url: {backend.url}\n    headers: {{X-Api-Key: '${{PETS_KEY}}'}}"
        )
    )
    with TestClient(create_app(Mesh(load_settings(cfg, env={"PETS_KEY": "k-123"})))) as c:
        assert c.post("/tool/list_pets", json={}, headers=AGENT).status_code == 200
    assert backend.requests[-1].headers.get("X-Api-Key") == "k-123"
