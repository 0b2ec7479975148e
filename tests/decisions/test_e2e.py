"""Precedents with real processes on loopback: `flux7 serve` (granian), `mem7 serve`, an HTTP upstream."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.shared.decisions.memory_client import parse_memory_list
from tests.decisions.conftest import POLICY
from tests.decisions.support import Mem7, rpc_tool
from tests.support.http import free_port, wait_until
from tests.support.mesh import pets_mesh_config
from tests.support.server import Server, running_server
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}
READ, WRITE = "get_pet_by_id", "create_pet"


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as p:
        yield p


def config(tmp_path: Path, backend: Backend, memory_url: str) -> Path:
    return pets_mesh_config(
        tmp_path,
        backend,
        POLICY,
        approval_timeout=30,
        memory=f'{{url: "{memory_url}"}}',
        extra="decisions: {retry_max_seconds: 1}",
    )


def start_call(pool: ThreadPoolExecutor, server: Server, tool: str, params: dict[str, Any]) -> Future[httpx.Response]:
    return pool.submit(
        httpx.post, f"{server.url}/tool/{tool}", json={"params": params}, headers=AGENT, timeout=60, trust_env=False
    )


def pending(server: Server) -> list[dict[str, Any]]:
    r = httpx.get(f"{server.url}/approvals", params={"status": "pending"}, headers=ADMIN, trust_env=False)
    return list(r.json())


def resolve_next(server: Server, action: str, by: str = "alice") -> str:
    wait_until(lambda: bool(pending(server)), timeout=15)
    [a] = pending(server)
    r = httpx.post(
        f"{server.url}/approvals/{a['id']}/{action}", json={"resolved_by": by}, headers=ADMIN, trust_env=False
    )
    assert r.status_code == 200, r.text
    return str(a["id"])


def human_decisions(mem7: Mem7, tool: str, status: str) -> int:
    tags = ["decision", status, tool, "agent:claude", "by:human"]
    return len(parse_memory_list(rpc_tool(mem7.url, "memory_list", {"tags": tags})))


def trace_rule(server: Server, trace_id: str) -> str:
    [t] = httpx.get(f"{server.url}/traces", params={"trace": trace_id}, headers=ADMIN, trust_env=False).json()
    return str(t["policy_rule"])


def test_three_human_approvals_pass_the_fourth_read_a_write_never_and_a_refusal_blocks(
    tmp_path: Path, backend: Backend, pool: ThreadPoolExecutor, engine_configs: str
) -> None:
    mem7 = Mem7(tmp_path / "mem7", free_port()).start()
    try:
        with running_server(config(tmp_path, backend, mem7.url)) as server:
            for tool, params in ((READ, {"petId": "1"}), (WRITE, {"name": "Kit"})):
                for _ in range(3):
                    call = start_call(pool, server, tool, params)
                    resolve_next(server, "approve")
                    assert call.result(30).status_code == 200
                wait_until(lambda t=tool: human_decisions(mem7, t, "approved") == 3, timeout=15)  # type: ignore[misc]

            fourth = httpx.post(
                f"{server.url}/tool/{READ}", json={"params": {"petId": "1"}}, headers=AGENT, timeout=10, trust_env=False
            )
            assert fourth.status_code == 200 and fourth.json()["policy"] == "allow"
            assert "approval_id" not in fourth.json() and pending(server) == []
            assert trace_rule(server, fourth.json()["trace_id"]) == "supervisor:mem7"

            write = start_call(pool, server, WRITE, {"name": "Kit"})
            denied = resolve_next(server, "deny")
            r = write.result(30)
            assert r.status_code == 403 and r.json()["error"] == "approval denied by owner:admin-token"
            assert r.json()["approval_id"] == denied

            # one refusal, from a supervisor, of the read tool blocks it from now on
            rpc_tool(
                mem7.url,
                "memory_store",
                {
                    "key": "decision.get_pet_by_id.sup1",
                    "value": "rejected by supervisor:sup7 \u2014 agent:claude tool:get_pet_by_id",
                    "tags": ["decision", "denied", READ, "agent:claude", "by:supervisor"],
                    "agent": "flux7-mesh",
                },
            )
            blocked = start_call(pool, server, READ, {"petId": "1"})
            resolve_next(server, "approve")
            assert blocked.result(30).json()["policy"] == "human_approval"

            table = httpx.get(f"{server.url}/approvals/precedents", headers=ADMIN, trust_env=False).json()
            rows = {p["tool"]: p for p in table["precedents"]}
            assert rows[READ]["refused"] == 1 and rows[READ]["would_auto_approve"] is False
            assert rows[READ]["other_approved"] == 1  # the by:mem7 auto-approval, never counted
            assert rows[WRITE]["auto_approvable"] is False
    finally:
        mem7.stop()


def test_memory_killed_mid_run_escalates_and_never_allows(
    tmp_path: Path, backend: Backend, pool: ThreadPoolExecutor, engine_configs: str
) -> None:
    mem7 = Mem7(tmp_path / "mem7", free_port()).start()
    try:
        with running_server(config(tmp_path, backend, mem7.url)) as server:
            for _ in range(3):
                call = start_call(pool, server, READ, {"petId": "1"})
                resolve_next(server, "approve")
                assert call.result(30).status_code == 200
            wait_until(lambda: human_decisions(mem7, READ, "approved") == 3, timeout=15)
            ok = httpx.post(
                f"{server.url}/tool/{READ}", json={"params": {"petId": "1"}}, headers=AGENT, timeout=10, trust_env=False
            )
            assert ok.json()["policy"] == "allow"

            mem7.kill9()
            call = start_call(pool, server, READ, {"petId": "1"})
            wait_until(lambda: bool(pending(server)), timeout=15)  # escalated to the queue, not allowed
            assert not call.done()
            resolve_next(server, "approve")
            assert call.result(30).json()["policy"] == "human_approval"

            def failed_writes() -> float:
                text = httpx.get(f"{server.url}/metrics", headers=ADMIN, trust_env=False).text
                line = next(x for x in text.splitlines() if x.startswith("agent_mesh_mem7_writes_failed_total "))
                return float(line.split()[1])

            wait_until(lambda: failed_writes() >= 1, timeout=15)

            mem7.start()  # back: the decision made while it was down arrives from the outbox, precedents apply again
            wait_until(lambda: human_decisions(mem7, READ, "approved") == 4, timeout=30)
            again = httpx.post(
                f"{server.url}/tool/{READ}", json={"params": {"petId": "2"}}, headers=AGENT, timeout=10, trust_env=False
            )
            assert again.json()["policy"] == "allow"
            assert again.json()["trace_id"] and trace_rule(server, again.json()["trace_id"]) == "supervisor:mem7"
    finally:
        mem7.stop()
