"""The deployment's promise: with the server running under `litestream replicate -exec`, every acknowledged write
reaches the replica, and `flux7 restore` into an empty directory gives back the same database, workspace and trace
file, with both hash chains holding."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.http import wait_until
from tests.support.server import running_server
from tests.upstreams.servers.http_backend import Backend

from .support import (
    env_for,
    files_under,
    replicated,
    run_cli,
    schema,
    source_for,
    tables,
    write_config,
)

pytestmark = pytest.mark.served

AGENT = {"Authorization": "Bearer agent:claude"}


def _post(url: str, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers=headers or {}, timeout=60, trust_env=False)


def _store(url: str, i: int) -> None:
    rpc = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": "memory_store",
            "arguments": {"key": f"fact.{i % 25}", "value": f"value {i} ünïcode", "tags": ["t", f"n{i % 3}"]},
        },
    }
    answer = _post(url, "/rpc", rpc).json()
    assert "error" not in answer and not answer["result"].get("isError"), answer


def _write_everything(url: str, db: Path) -> None:
    """Traces, denials, grants, a halt and its resume, memory stores and approvals, several at a time."""
    with ThreadPoolExecutor(6) as pool:
        calls = [pool.submit(_post, url, "/tool/list_pets", {"params": {"limit": i}}, AGENT) for i in range(60)]
        calls += [pool.submit(_post, url, "/tool/delete_pet", {"params": {"petId": "1"}}, AGENT) for _ in range(5)]
        stores = [pool.submit(_store, url, i) for i in range(60)]
        statuses = [c.result().status_code for c in calls]
        for s in stores:
            s.result()
    assert statuses.count(200) == 60 and statuses.count(403) == 5

    grants = [_post(url, "/grants", {"agent": f"a{i}", "tools": "get_*", "duration": "1h"}) for i in range(3)]
    assert all(g.status_code == 201 for g in grants)
    assert httpx.delete(f"{url}/grants/{grants[0].json()['id']}", trust_env=False).status_code == 200
    halt = _post(url, "/halts", {"scope": "agent", "target": "a1", "reason": "drill"})
    assert halt.status_code == 201
    assert _post(url, f"/halts/{halt.json()['halt']['id']}/resume", {}).status_code == 200

    # Four calls that need a human block until resolved: two approved (they run), two denied.
    results: list[int] = []
    lock = threading.Lock()

    def blocked(i: int) -> None:
        r = _post(url, "/tool/create_pet", {"params": {"name": f"pet{i}"}}, AGENT)
        with lock:
            results.append(r.status_code)

    threads = [threading.Thread(target=blocked, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    pending: list[dict[str, Any]] = []

    def four_pending() -> bool:
        nonlocal pending
        pending = httpx.get(f"{url}/approvals", trust_env=False).json()
        return len(pending) == 4

    wait_until(four_pending, timeout=20)
    for i, approval in enumerate(pending):
        verb = "approve" if i % 2 == 0 else "deny"
        assert _post(url, f"/approvals/{approval['id']}/{verb}", {"reasoning": "drill"}).status_code == 200
    for t in threads:
        t.join(30)
    assert sorted(results) == [200, 200, 403, 403]

    # Decision facts reach memory in the background: wait for all four before calling the database quiet.
    def decisions() -> int:
        conn = sqlite3.connect(db)
        try:
            return int(conn.execute("SELECT count(*) FROM memory_journal WHERE entity LIKE 'decision.%'").fetchone()[0])
        finally:
            conn.close()

    wait_until(lambda: decisions() == 4, timeout=20)


def test_killed_deployment_restores_into_an_empty_directory_with_every_row_and_file(
    tmp_path: Path, backend: Backend
) -> None:
    data, replica = tmp_path / "data", tmp_path / "replica"
    config = write_config(tmp_path, "data", backend, policies="data-policies")
    with replicated(config, data, replica) as server:
        _write_everything(server.url, data / "flux7.db")
        # A policy edit made through the API (as the console makes it): a file on this machine's disk only.
        edit = httpx.put(
            f"{server.url}/policies/claude/tools/create_pet", json={"action": "deny", "by": "ops"}, trust_env=False
        )
        assert edit.status_code == 200, edit.text
        counts = httpx.get(f"{server.url}/health", trust_env=False).json()["traces"]
        chained = httpx.get(f"{server.url}/traces/verify", trust_env=False).json()["chained"]
        # The worker holds its calls' metric series up to 0.5 s (shared/metrics.py); a scrape writes them now, so
        # none is committed after the replica has caught up.
        assert httpx.get(f"{server.url}/metrics", trust_env=False).status_code == 200
        txid = server.caught_up()
        assert txid > 0
        server.kill9()

    # Restore as a fresh machine would: an empty directory, the same litestream.yml, only the replica to go on.
    restored = tmp_path / "restored"
    assert not restored.exists()
    restored_config = write_config(tmp_path, "restored", backend, policies="restored-policies")
    (tmp_path / "restored-policies" / "agents.yaml").write_text("name: agents\nrules: []\n")  # the image's default
    r = run_cli(
        "restore",
        "--config",
        str(restored_config),
        "--litestream",
        str(source_for(data, replica).config),
        env=env_for(restored, replica),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restored" in r.stdout and "re-created the trace file" in r.stdout
    assert "wrote back policy file(s): agent-claude.yaml, agents.yaml" in r.stdout

    # The policies in force when the replica was made, not the image's defaults.
    policy_files = {p.name: p.read_bytes() for p in (tmp_path / "data-policies").glob("*.yaml")}
    assert sorted(policy_files) == ["agent-claude.yaml", "agents.yaml"]
    assert {p.name: p.read_bytes() for p in (tmp_path / "restored-policies").glob("*.yaml")} == policy_files

    # Every table, row by row (FTS shadow tables and Litestream's own included), and the schema.
    original, copy = data / "flux7.db", restored / "flux7.db"
    assert schema(copy) == schema(original)
    before, after = tables(original), tables(copy)
    assert before.keys() == after.keys()
    for name in before:
        assert after[name] == before[name], f"table {name} differs after restore"
    assert len(before["approvals"]) == 4 and len(before["grants"]) == 3 and len(before["halts"]) == 1

    # The files beside the database, re-created from it byte for byte.
    assert (restored / "traces.jsonl").read_bytes() == (data / "traces.jsonl").read_bytes()
    assert files_under(restored / "memory" / "workspace") == files_under(data / "memory" / "workspace")

    # `mem7 export` from the restored database gives the original workspace too.
    mem7_dir, exported = tmp_path / "mem7", tmp_path / "exported"
    r = run_cli("restore", "--from", replica.as_uri(), "--db", str(mem7_dir / "index.db"))
    assert r.returncode == 0, r.stdout + r.stderr
    export = run_mem7("export", "--to", str(exported), env={**env_for(mem7_dir, replica), "MEM7_DIR": str(mem7_dir)})
    assert export.returncode == 0, export.stdout + export.stderr
    assert files_under(exported / "workspace") == files_under(data / "memory" / "workspace")

    # The restored deployment serves, and both hash chains hold.
    with running_server(restored_config) as again:
        verify = httpx.get(f"{again.url}/traces/verify", trust_env=False).json()
        assert verify.get("break") is None and verify["chained"] == chained
        assert httpx.get(f"{again.url}/health", trust_env=False).json()["traces"] == counts
        assert counts["allowed"] >= 62 and counts["denied"] >= 5
        chain = httpx.get(f"{again.url}/memory/chain", trust_env=False).json()
        assert chain["holds"] is True and chain["report"]["entries"] == 60 + 4
        grants = httpx.get(f"{again.url}/grants", trust_env=False).json()
        assert sorted(g["agent"] for g in grants) == ["a1", "a2"]
        decided = _post(again.url, "/decide", {"tool": "create_pet"}, AGENT)
        assert (decided.status_code, decided.json()["action"]) == (403, "deny")  # the edit holds after restore


def run_mem7(*args: str, env: dict[str, str]) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", "from flux7.functions.entry import mem7_main; raise SystemExit(mem7_main())", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
