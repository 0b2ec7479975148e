"""POST /tool/{name} is served ahead of Litestar (functions/hotpath.py): it must answer exactly as the Litestar
route does. With `console.cors` on, Litestar serves the route itself (its CORS middleware must see every answer),
so the same requests to both apps are compared: status, JSON body (trace ids and latencies aside), headers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.functions.conftest import AGENT, make_config
from tests.upstreams.servers.http_backend import Backend

JSON = {"Content-Type": "application/json"}
LISTED = "http://console.example"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

# (name, path, body bytes, headers)
CASES: list[tuple[str, str, bytes, dict[str, str]]] = [
    ("allowed", "/tool/list_pets", b'{"params": {"limit": 2}}', {**AGENT, **JSON}),
    ("arguments unwrapped", "/tool/get_pet_by_id", b'{"petId": "1"}', {**AGENT, **JSON}),
    ("no body", "/tool/list_pets", b"", AGENT),
    ("denied", "/tool/delete_pet", b'{"params": {"petId": "1"}}', {**AGENT, **JSON}),
    ("denied by condition", "/tool/get_pet_by_id", b'{"params": {"petId": "2"}}', {**AGENT, **JSON}),
    ("unknown tool", "/tool/nope", b"{}", {**AGENT, **JSON}),
    ("malformed JSON", "/tool/list_pets", b"{not json", {**AGENT, **JSON}),
    ("params not an object", "/tool/list_pets", b'{"params": "x"}', {**AGENT, **JSON}),
    ("body not an object", "/tool/list_pets", b"[1]", {**AGENT, **JSON}),
    ("too deep", "/tool/list_pets", b"[" * 200 + b"]" * 200, {**AGENT, **JSON}),
    ("too large", "/tool/list_pets", json.dumps({"x": "y" * 5000}).encode(), {**AGENT, **JSON}),
    ("not JSON", "/tool/list_pets", b"{}", {**AGENT, "Content-Type": "text/plain"}),
    ("cross-site", "/tool/list_pets", b"{}", {**AGENT, **JSON, "Sec-Fetch-Site": "cross-site"}),
    ("foreign origin", "/tool/list_pets", b"{}", {**AGENT, **JSON, "Origin": "http://evil.example"}),
    ("unknown agent token", "/tool/list_pets", b"{}", {"Authorization": "Bearer f7a_nope", **JSON}),
    ("private callback", "/tool/list_pets", b"{}", {**AGENT, **JSON, "X-Callback-URL": "http://127.0.0.1:9/x"}),
    ("backend error", "/tool/get_boom", b"{}", {**AGENT, **JSON}),
    ("trace context", "/tool/echo_headers", b"{}", {**AGENT, **JSON, "traceparent": TRACEPARENT}),
]
_VOLATILE = ("trace_id", "latency_ms")


def _seen(r: Any) -> tuple[int, Any, dict[str, str]]:
    body = r.json()
    if isinstance(body, dict):
        body = {k: ("<set>" if k in _VOLATILE and v not in ("", 0) else v) for k, v in body.items()}
        if body.get("trace_id") == "<set>" and r.json()["trace_id"] == TRACEPARENT[3:35]:
            body["trace_id"] = "caller's"
        result = body.get("result")
        if isinstance(result, dict):  # the echoed trace headers carry a new span id each call
            body["result"] = sorted(result)
    headers = {k: v for k, v in r.headers.items() if k in ("content-type", "retry-after")}
    if "x-trace-id" in r.headers:
        headers["x-trace-id"] = "<set>" if r.headers["x-trace-id"] == r.json().get("trace_id") else "differs"
    return r.status_code, body, headers


@pytest.fixture
def pair(tmp_path: Path, backend: Backend) -> Iterator[tuple[TestClient[Any], TestClient[Any]]]:
    common = "max_body_bytes: 1024\nauth: {admin_token: adm1n}\n"
    (tmp_path / "hot").mkdir()
    (tmp_path / "routed").mkdir()
    hot_cfg = make_config(tmp_path / "hot", backend, common)
    routed_cfg = make_config(
        tmp_path / "routed", backend, f"{common}console: {{allowed_origins: ['{LISTED}'], cors: true}}"
    )
    hot_app = create_app(Mesh(load_settings(hot_cfg, env={})))
    routed_app = create_app(Mesh(load_settings(routed_cfg, env={})))
    assert getattr(hot_app, "hot", None) is not None and getattr(routed_app, "hot", None) is None
    with TestClient(hot_app) as hot, TestClient(routed_app) as routed:
        yield hot, routed


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_hot_path_answers_as_the_litestar_route(
    pair: tuple[TestClient[Any], TestClient[Any]], case: tuple[str, str, bytes, dict[str, str]]
) -> None:
    hot, routed = pair
    _, path, body, headers = case
    expected = _seen(routed.post(path, content=body, headers=headers))
    got = _seen(hot.post(path, content=body, headers=headers))
    assert got == expected
    assert got[0] != 500


def test_the_hot_path_traces_the_call_it_answers(pair: tuple[TestClient[Any], TestClient[Any]]) -> None:
    hot, _ = pair
    r = hot.post("/tool/list_pets", json={"params": {"limit": 1}}, headers={**AGENT, "x-session-id": "s9"})
    assert r.status_code == 200
    trace_id = r.json()["trace_id"]
    [t] = hot.get("/traces", params={"trace": trace_id}, headers={"Authorization": "Bearer adm1n"}).json()
    assert (t["tool"], t["policy"], t["status_code"], t["session_id"], t["params"]) == (
        "list_pets",
        "allow",
        200,
        "s9",
        {"limit": 1},
    )


def test_paths_that_are_not_one_tool_name_go_to_litestar(pair: tuple[TestClient[Any], TestClient[Any]]) -> None:
    hot, _ = pair
    for path in ("/tool/", "/tool/list_pets/extra"):
        r = hot.post(path, content=b"{}", headers={**AGENT, **JSON})
        assert r.status_code == 404 and r.text == "404 page not found\n"
    assert hot.head("/tool/list_pets", headers=AGENT).status_code == 405  # HEAD answers as GET: no GET here
