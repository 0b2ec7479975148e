from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from flux7.shared.decisions.facts import DecisionWriter, decision_fact, resolver_kind, signed_decision
from flux7.shared.decisions.memory_client import InProcessMemory, RpcMemory, parse_memory_list
from flux7.shared.memory.service import MemoryService
from tests.decisions.conftest import ADMIN, AGENT, build_mesh, mesh_config, running
from tests.decisions.support import wait_for
from tests.support.http import free_port
from tests.upstreams.servers.http_backend import Backend


@pytest.mark.parametrize(
    ("resolved_by", "kind"),
    [
        ("alice", "human"),
        ("cli:bob", "human"),
        ("http:127.0.0.1", "human"),
        ("mcp:claude", "supervisor"),  # an agent resolving over MCP is never a human precedent
        ("supervisor:supervisor", "supervisor"),
        ("auto:rules", "supervisor"),
        ("bot:jev", "supervisor"),
        ("supervisor:mem7", "mem7"),
        ("system:timeout", "system"),
    ],
)
def test_resolvers_are_classified_as_the_console_does(resolved_by: str, kind: str) -> None:
    assert resolver_kind(resolved_by) == kind


def test_a_decision_fact_has_the_reference_key_value_and_tags() -> None:
    fact = decision_fact(
        approval_id="0123456789abcdef",
        tool="filesystem.read_text_file",
        agent="claude",
        status="denied",
        resolved_by="supervisor:sup7",
        reasoning="rule 'x' matched;\n path=/etc",
    )
    assert fact.key == "decision.filesystem.read_text_file.0123456789abcdef"
    assert fact.value == (
        "rejected by supervisor:sup7 \u2014 agent:claude tool:filesystem.read_text_file"
        " reason:rule 'x' matched; path=/etc"
    )
    assert fact.tags == (
        "decision",
        "denied",
        "filesystem.read_text_file",
        "agent:claude",
        "by:supervisor",
        "approval:0123456789abcdef",
    )
    assert fact.agent == "flux7-mesh"
    timed_out = decision_fact(
        approval_id="a", tool="t", agent="x", status="timeout", resolved_by="system:timeout", trace_id="ab12"
    )
    assert timed_out.value == "timed out by system:timeout \u2014 agent:x tool:t"
    assert timed_out.tags[-3:] == ("by:system", "approval:a", "trace:ab12")
    with pytest.raises(ValueError):
        decision_fact(approval_id="a", tool="t", agent="x", status="pending", resolved_by="")


@pytest.mark.usefixtures("engine_configs")
async def test_every_resolution_is_written_to_memory_with_who_settled_it(tmp_path: Path, backend: Backend) -> None:
    mesh = build_mesh(mesh_config(tmp_path, backend))
    async with running(mesh) as client:
        calls = [asyncio.create_task(client.post("/tool/create_pet", json={"name": n}, headers=AGENT)) for n in "ab"]
        await wait_for(lambda: _pending_count(client, 2))
        first, second = [a["id"] for a in (await client.get("/approvals?status=pending", headers=ADMIN)).json()]
        r1 = await client.post(
            f"/approvals/{first}/approve", json={"resolved_by": "alice", "reasoning": "fine"}, headers=ADMIN
        )
        r2 = await client.post(f"/approvals/{second}/deny", json={"resolved_by": "supervisor:sup7"}, headers=ADMIN)
        assert r1.status_code == r2.status_code == 200
        await asyncio.gather(*calls)
        assert await mesh.decisions.drain(10)
        memory = InProcessMemory(mesh.memory)
        listed = {m.key: m for m in parse_memory_list(await memory.call_tool("memory_list", {"tags": ["decision"]}))}
        assert set(listed) == {f"decision.create_pet.{first}", f"decision.create_pet.{second}"}
        base = ("decision", "create_pet", "agent:claude")
        for approval_id, status, kind in ((first, "approved", "human"), (second, "denied", "supervisor")):
            fact = listed[f"decision.create_pet.{approval_id}"]
            row = mesh.db.query_one("SELECT resolved_at, trace_id FROM approvals WHERE id = ?", (approval_id,))
            assert row[1]  # the call's trace id, which the fact names so the console links the two
            linked = {f"approval:{approval_id}", f"trace:{row[1]}"}
            assert {t for t in fact.tags if not t.startswith(("at:", "sig:"))} == {*base, status, f"by:{kind}", *linked}
            # signed by the mesh: the MAC covers the approval id, tool, agent, outcome, resolver kind, time and trace
            signed = signed_decision(fact.key, fact.tags, "create_pet", "claude", mesh.decisions.signer)
            assert signed is not None
            assert (signed.approval_id, signed.status, signed.kind, signed.trace_id) == (
                approval_id,
                status,
                kind,
                row[1],
            )
            assert abs(signed.at - row[0]) < 0.001
        recalled = await memory.call_tool("memory_recall", {"key": f"decision.create_pet.{first}"})
        assert "approved by owner:admin-token \u2014 agent:claude tool:create_pet reason:fine" in recalled
        assert (mesh.decisions.attempted, mesh.decisions.succeeded, mesh.decisions.failed) == (2, 2, 0)
        metrics = (await client.get("/metrics", headers=ADMIN)).text
        assert "agent_mesh_mem7_writes_attempted_total 2" in metrics
        assert "agent_mesh_mem7_writes_succeeded_total 2" in metrics
        assert "agent_mesh_mem7_writes_failed_total 0" in metrics


@pytest.mark.usefixtures("engine_configs")
async def test_a_timeout_is_written_as_timed_out_by_the_system(tmp_path: Path, backend: Backend) -> None:
    cfg = mesh_config(tmp_path, backend)
    cfg.write_text(cfg.read_text().replace("timeout_seconds: 10", "timeout_seconds: 0.3"))
    mesh = build_mesh(cfg)
    async with running(mesh) as client:
        r = await client.post("/tool/create_pet", json={"name": "a"}, headers=AGENT)
        assert r.status_code == 408
        assert await mesh.decisions.drain(10)
        text = await InProcessMemory(mesh.memory).call_tool(
            "memory_list", {"tags": ["decision", "timeout", "by:system"]}
        )
        assert f"decision.create_pet.{r.json()['approval_id']}" in text


@pytest.mark.usefixtures("engine_configs")
async def test_a_memory_that_is_down_fails_the_write_not_the_approval(tmp_path: Path, backend: Backend) -> None:
    port = free_port()  # nothing listens there
    mesh = build_mesh(mesh_config(tmp_path, backend, f"memory: {{url: 'http://127.0.0.1:{port}'}}"))
    async with running(mesh) as client:
        call = asyncio.create_task(client.post("/tool/create_pet", json={"name": "a"}, headers=AGENT))
        await wait_for(lambda: _pending_count(client, 1))
        [a] = (await client.get("/approvals?status=pending", headers=ADMIN)).json()
        r = await client.post(f"/approvals/{a['id']}/approve", json={"resolved_by": "alice"}, headers=ADMIN)
        assert r.status_code == 200
        assert (await call).status_code == 200
        assert await mesh.decisions.drain(10)
        assert mesh.decisions.attempted >= 1 and mesh.decisions.succeeded == 0
        assert mesh.decisions.failed == mesh.decisions.attempted
        metrics = (await client.get("/metrics", headers=ADMIN)).text
        assert "agent_mesh_mem7_writes_failed_total 0" not in metrics
        # the fact waits in the outbox for memory to come back
        rows = mesh.db.query("SELECT key, attempts, last_error FROM decision_outbox")
        assert [r[0] for r in rows] == [f"decision.create_pet.{a['id']}"]
        assert rows[0][1] >= 1 and "unreachable" in rows[0][2]


async def test_a_resolution_on_a_thread_without_a_loop_is_still_written(memory_service: MemoryService) -> None:
    writer = DecisionWriter(lambda: InProcessMemory(memory_service))
    fact = decision_fact(approval_id="abc", tool="t.read", agent="x", status="approved", resolved_by="ann")
    thread = threading.Thread(target=writer.submit, args=(fact,))
    thread.start()
    thread.join()
    assert await writer.drain(10)
    assert writer.succeeded == 1
    text, _ = memory_service.call_tool("memory_recall", {"key": "decision.t.read.abc"}, authenticated=True)
    assert "approved by ann" in text


async def test_without_memory_nothing_is_attempted() -> None:
    writer = DecisionWriter(lambda: None)
    writer.submit(decision_fact(approval_id="a", tool="t", agent="x", status="approved", resolved_by="ann"))
    assert await writer.drain(1)
    assert writer.attempted == 0


async def test_a_slow_memory_never_delays_the_listener(tmp_path: Path) -> None:
    # the listener returns at once even though the write cannot complete
    from tests.support.http import serve_json

    release = threading.Event()

    def slow(*_: object) -> tuple[int, object]:
        release.wait(10)
        return 200, {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "ok"}]}}

    with serve_json(slow) as (url, _):
        writer = DecisionWriter(lambda: RpcMemory(url))
        loop = asyncio.get_running_loop()
        start = loop.time()
        writer.submit(decision_fact(approval_id="a", tool="t", agent="x", status="approved", resolved_by="ann"))
        assert loop.time() - start < 0.05
        assert not await writer.drain(0.1)
        release.set()
        assert await writer.drain(10)
        assert writer.succeeded == 1


async def _pending_count(client: object, n: int) -> bool:
    r = await client.get("/approvals?status=pending", headers=ADMIN)  # type: ignore[attr-defined]
    return len(r.json()) >= n
