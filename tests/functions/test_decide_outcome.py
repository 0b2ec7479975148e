"""`POST /decide` with `wait` (a human_approval waits in the queue) and `POST /decide/{trace_id}/outcome` (the
caller reports what the call it ran did, completing the same trace row)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.support.mesh import pets_mesh_config
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

POLICY = """
name: coders
agent: "*"
rules:
  - tools: ["rm_tree"]
    action: deny
  - tools: ["write_file"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""

ADMIN = {"Authorization": "Bearer adm1n"}
CODER = {"Authorization": "Bearer agent:coder"}


@pytest.fixture
def client(tmp_path: Path, backend: Backend) -> Iterator[TestClient[Any]]:
    mesh = Mesh(load_settings(pets_mesh_config(tmp_path, backend, POLICY, approval_timeout=10), env={}))
    with TestClient(create_app(mesh)) as c:
        yield c


def trace(client: TestClient[Any], trace_id: str) -> dict[str, Any]:
    [row] = client.get("/traces", params={"trace": trace_id}, headers=ADMIN).json()
    return dict(row)


def test_an_outcome_completes_the_decided_row_once(client: TestClient[Any]) -> None:
    decided = client.post("/decide", json={"tool": "shell", "arguments": {"command": "make"}}, headers=CODER).json()
    assert decided["action"] == "allow"
    report = {"ok": False, "exit_code": 2, "bytes": 40, "duration_ms": 1500.4, "error": "make: *** no rule"}
    r = client.post(f"/decide/{decided['trace_id']}/outcome", json=report, headers=CODER)
    assert r.status_code == 200, r.text
    row = trace(client, decided["trace_id"])
    assert (row["tool"], row["policy"], row["status_code"], row["exit_code"], row["error"]) == (
        "shell",
        "allow",
        500,
        2,
        "make: *** no rule",
    )
    assert row["latency_ms"] >= 1500 and row["estimated_output_tokens"] == 10 and row["revision"] == 1
    again = client.post(f"/decide/{decided['trace_id']}/outcome", json={"ok": True}, headers=CODER)
    assert again.status_code == 409 and "already has its outcome" in again.json()["error"]


def test_outcomes_that_do_not_belong_are_refused(client: TestClient[Any]) -> None:
    allowed = client.post("/decide", json={"tool": "read_file", "arguments": {}}, headers=CODER).json()["trace_id"]
    denied = client.post("/decide", json={"tool": "rm_tree", "arguments": {}}, headers=CODER).json()["trace_id"]
    mesh_tool = client.post("/decide", json={"tool": "list_pets", "arguments": {}}, headers=CODER).json()["trace_id"]
    other = {"Authorization": "Bearer agent:someone-else"}
    cases = [
        ("nope", {"ok": True}, CODER, 404, "no call with trace id"),
        (allowed, {"ok": True}, other, 403, "another agent's call"),
        (denied, {"ok": True}, CODER, 409, "was not allowed to run (deny)"),
        (mesh_tool, {"ok": True}, CODER, 409, "list_pets is a mesh tool"),
        (allowed, {"ok": True, "bytes": -1}, CODER, 400, "must be non-negative"),
        (allowed, {"ok": True, "size": 3}, CODER, 400, "invalid outcome"),
        (allowed, {}, CODER, 400, "invalid outcome"),
    ]
    for trace_id, body, headers, status, message in cases:
        r = client.post(f"/decide/{trace_id}/outcome", json=body, headers=headers)
        assert (r.status_code, message in r.json()["error"]) == (status, True), (trace_id, body, r.text)
    assert "revision" not in trace(client, allowed)  # revision 0 (omitted on the wire): none of them touched it
    assert client.post(f"/decide/{allowed}/outcome", json={"ok": True, "bytes": 8}, headers=ADMIN).status_code == 200


def _decide_in_background(client: TestClient[Any], answers: list[Any]) -> threading.Thread:
    body = {"tool": "write_file", "arguments": {"path": "a.txt"}, "wait": True}
    thread = threading.Thread(target=lambda: answers.append(client.post("/decide", json=body, headers=CODER)))
    thread.start()
    return thread


@pytest.mark.parametrize("verdict", ["approve", "deny"])
def test_decide_with_wait_holds_the_call_until_a_human_resolves_it(client: TestClient[Any], verdict: str) -> None:
    answers: list[Any] = []
    thread = _decide_in_background(client, answers)
    held = wait_until(lambda: client.get("/approvals", params={"status": "pending"}, headers=ADMIN).json(), 15)
    assert [(a["agent_id"], a["tool"]) for a in held] == [("coder", "write_file")]
    assert answers == []  # still waiting
    r = client.post(f"/approvals/{held[0]['id']}/{verdict}", json={"resolved_by": "ops"}, headers=ADMIN)
    assert r.status_code == 200
    thread.join(15)
    answer = answers[0]
    body = answer.json()
    status = {"approve": "approved", "deny": "denied"}[verdict]
    assert (body["approval_id"], body["approval_status"]) == (held[0]["id"], status)
    row = trace(client, body["trace_id"])
    assert (row["policy"], row["approval_id"], row["approved_by"]) == (
        "human_approval",
        held[0]["id"],
        "owner:admin-token",
    )
    outcome = client.post(f"/decide/{body['trace_id']}/outcome", json={"ok": True, "bytes": 4}, headers=CODER)
    if verdict == "approve":
        assert (answer.status_code, body["action"], row["status_code"]) == (200, "allow", 200)
        assert outcome.status_code == 200 and trace(client, body["trace_id"])["revision"] == 2
    else:
        assert (answer.status_code, body["action"], row["status_code"]) == (403, "deny", 403)
        assert outcome.status_code == 409  # nothing ran: there is no outcome to report


def test_decide_without_wait_still_answers_human_approval_at_once(client: TestClient[Any]) -> None:
    r = client.post("/decide", json={"tool": "write_file", "arguments": {}}, headers=CODER)
    assert (r.status_code, r.json()["action"]) == (200, "human_approval")
    assert client.get("/approvals", params={"status": "pending"}, headers=ADMIN).json() == []
