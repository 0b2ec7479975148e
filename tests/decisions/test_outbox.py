"""The decision outbox (issue 13, item 6) with real processes: decisions made while memory is down wait in the
database, survive a kill -9 of the server, and reach memory in the order they were made, once each, when it
comes back - with two workers delivering."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from flux7.shared.decisions.facts import signed_decision
from flux7.shared.decisions.memory_client import parse_memory_list
from flux7.shared.decisions.signing import DecisionSigner
from flux7.shared.store.db import Database
from tests.decisions.conftest import POLICY
from tests.decisions.support import Mem7, rpc_tool
from tests.decisions.test_e2e import resolve_next, start_call
from tests.support.http import free_port, wait_until
from tests.support.mesh import pets_mesh_config
from tests.support.server import Server, start_server, stop_server
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}
WRITE = "create_pet"  # a write: no precedent ever auto-approves it, so every call here is a human's decision


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as p:
        yield p


def outbox(db: Database) -> list[tuple[str, int]]:
    """(key, attempts) of the facts waiting for memory, in delivery order."""
    return [(r[0], r[1]) for r in db.query("SELECT key, attempts FROM decision_outbox ORDER BY seq")]


def decide_by_human(server: Server, pool: ThreadPoolExecutor, action: str, name: str) -> str:
    call = start_call(pool, server, WRITE, {"name": name})
    approval_id = resolve_next(server, action)
    assert call.result(30).status_code == (200 if action == "approve" else 403)
    return approval_id


def time_out_one(server: Server) -> str:
    httpx.put(f"{server.url}/approvals/settings", json={"timeout_seconds": 1}, headers=ADMIN, trust_env=False)
    r = httpx.post(f"{server.url}/tool/{WRITE}", json={"params": {"name": "late"}}, headers=AGENT, timeout=30)
    assert r.status_code == 408, r.text
    httpx.put(f"{server.url}/approvals/settings", json={"timeout_seconds": 60}, headers=ADMIN, trust_env=False)
    return str(r.json()["approval_id"])


def test_decisions_made_while_memory_is_down_arrive_in_order_once_each_after_a_kill(
    tmp_path: Path, backend: Backend, pool: ThreadPoolExecutor, store: Database, engine_configs: str
) -> None:
    mem7 = Mem7(tmp_path / "mem7", free_port())  # its port is closed until mem7 starts, near the end
    config = pets_mesh_config(
        tmp_path,
        backend,
        POLICY,
        approval_timeout=60,
        memory=f'{{url: "{mem7.url}"}}',
        extra="decisions: {retry_max_seconds: 1}",
    )
    db = store  # the server's database: its SQLite file, or this test's PostgreSQL database (engine_configs)
    made: list[str] = []
    server = start_server(config)
    try:
        for i, action in enumerate(("approve", "deny", "approve")):
            made.append(decide_by_human(server, pool, action, f"pet{i}"))
        expected = [f"decision.{WRITE}.{i}" for i in made]
        assert [k for k, _ in outbox(db)] == expected
        wait_until(lambda: all(attempts >= 1 for _, attempts in outbox(db)[:1]), timeout=15)  # it did try

        server.kill9()  # no shutdown hook: only what the database holds survives
        assert [k for k, _ in outbox(db)] == expected
        server = start_server(config, workers=2)  # two deliverers now: one at a time, the order still holds
        made.append(time_out_one(server))
        made.append(decide_by_human(server, pool, "approve", "pet3"))
        made.append(decide_by_human(server, pool, "deny", "pet4"))
        expected = [f"decision.{WRITE}.{i}" for i in made]
        assert [k for k, _ in outbox(db)] == expected

        mem7.start()
        wait_until(lambda: outbox(db) == [], timeout=30)
        facts = parse_memory_list(rpc_tool(mem7.url, "memory_list", {"tags": ["decision"]}))
        assert [f.key for f in reversed(facts)] == expected  # newest first: reversed, the order they arrived in
        statuses = [next(t for t in f.tags if t in ("approved", "denied", "timeout")) for f in reversed(facts)]
        assert statuses == ["approved", "denied", "approved", "timeout", "approved", "denied"]
        signer = DecisionSigner((tmp_path / "decisions.key").read_text().strip().encode())
        for f in facts:
            assert signed_decision(f.key, f.tags, WRITE, "claude", signer) is not None
            history = rpc_tool(mem7.url, "memory_history", {"key": f.key})
            assert "(1 events," in history, history  # delivered once: no second store of the same key
    finally:
        stop_server(server)
        mem7.stop()
