"""The storage cost of a governed call, counted (issue 19): every SQLite statement and commit the write
connection runs for one call, over the in-process app and a real SQLite file. Not a timing: a later change that
adds a statement or a commit to the hot path fails here, and must say why by changing the budget below.

Each call kind is made once first: the first call of a tool or agent admits its metric label values (a few
statements, once per process), which is not the steady state this budget describes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
from tests.mcp_server.inproc import Rpc
from tests.support.mesh import PETS_POLICY, mesh_client, pets_mesh_config
from tests.support.waiting import eventually
from tests.upstreams.servers.http_backend import Backend, running_backend

AGENT = {"Authorization": "Bearer agent:claude"}

# (statements including BEGIN and COMMIT, commits) of one call, steady state, calls made one at a time. A row
# written alone: BEGIN, the chain head read, its line, its row (or its pointer moved), the head moved with the
# /health counts, COMMIT. The call's metrics are not among them: a serving worker holds its series in memory and
# writes them every metrics.FLUSH_SECONDS (test_metrics.py counts that transaction).
ALLOWED = (12, 2)  # the intent before the upstream (6), the outcome revision after (6)
DENIED = (6, 1)  # one trace row
SUBMITTED = (7, 1)  # the approval and its pending trace row, in one commit
MCP_ALLOWED = (12, 2)  # tools/call: the same pipeline as REST


@dataclass
class Counter:
    """The statements the write connection ran, as SQLite reports them (sqlite3's trace callback)."""

    statements: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, sql: str) -> None:
        with self.lock:
            self.statements.append(sql)

    def take(self) -> tuple[int, int]:
        with self.lock:
            seen, self.statements = self.statements, []
        return len(seen), sum(1 for s in seen if s.strip().upper() == "COMMIT")


@dataclass
class Mesh7:
    mesh: Mesh
    client: httpx.AsyncClient
    counter: Counter


@pytest.fixture
def backend() -> Iterator[Backend]:
    with running_backend() as b:
        yield b


@pytest.fixture
async def served(tmp_path: Path, backend: Backend) -> AsyncIterator[Mesh7]:
    config = pets_mesh_config(tmp_path, backend, PETS_POLICY, admin_token=None, trace_file=True)
    mesh = Mesh(load_settings(config, env={}))
    counter = Counter()
    async with mesh_client(mesh, AGENT) as client:
        mesh.db.trace_statements(counter)
        yield Mesh7(mesh, client, counter)
        mesh.db.trace_statements(None)


async def _call(m: Mesh7, tool: str, arguments: dict[str, object], status: int) -> tuple[int, int]:
    for _ in range(2):  # the first warms the label values up; the second is counted
        m.counter.take()
        r = await m.client.post(f"/tool/{tool}", json={"arguments": arguments})
        assert r.status_code == status, r.text
    return m.counter.take()


async def test_an_allowed_call_costs_its_budget_of_statements_and_commits(served: Mesh7) -> None:
    assert await _call(served, "list_pets", {}, 200) == ALLOWED
    assert served.mesh.tracer.verify().get("break") is None


async def test_a_denied_call_costs_one_commit(served: Mesh7) -> None:
    assert await _call(served, "delete_pet", {"petId": "1"}, 403) == DENIED


async def test_a_call_queued_for_approval_costs_one_commit_until_it_is_settled(served: Mesh7) -> None:
    m = served
    for _ in range(2):
        m.counter.take()
        task = asyncio.create_task(m.client.post("/tool/create_pet", json={"arguments": {"name": "rex"}}))
        pending = await eventually(lambda: m.mesh.approvals.query("pending"), what="the call queued for approval")
        counted = m.counter.take()  # the submission is committed before the approval can be seen pending
        m.mesh.approvals.resolve(pending[0].id, "deny", resolved_by="alice", resolver="", reasoning="no")
        assert (await task).status_code == 403
    assert counted == SUBMITTED


async def test_an_mcp_tools_call_costs_what_rest_costs(served: Mesh7) -> None:
    rpc = await Rpc(served.client).open()
    for _ in range(2):
        served.counter.take()
        await rpc.call("list_pets", {})
    assert served.counter.take() == MCP_ALLOWED
