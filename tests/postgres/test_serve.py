"""Real `flux7 serve` processes on one PostgreSQL database: governed calls allowed, denied and held for approval
on three instances at once, an approval held on one instance released by a resolve on another, the one chain
verifying on each."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from flux7.shared.cli.backup import main, restore_main
from tests.support.http import free_port, wait_until
from tests.support.mesh import PETS_POLICY, pets_mesh_config
from tests.support.server import REPO, running_server
from tests.upstreams.servers.http_backend import Backend

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}


def call(url: str, tool: str, params: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/tool/{tool}", json={"params": params}, headers=AGENT, timeout=30, trust_env=False)


def pending(url: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/approvals", params={"status": "pending"}, headers=ADMIN, timeout=10, trust_env=False)
    assert r.status_code == 200, r.text
    body = r.json()
    return list(body if isinstance(body, list) else body.get("approvals", []))


def test_three_instances_on_one_postgresql_govern_as_one(tmp_path: Path, backend: Backend, postgres_url: str) -> None:
    config = pets_mesh_config(tmp_path, backend, PETS_POLICY, extra=f"database: {postgres_url}")
    with running_server(config) as a, running_server(config) as b, running_server(config) as c:
        # allowed calls on every instance, at once
        with ThreadPoolExecutor(12) as pool:
            allowed = list(pool.map(lambda i: call((a, b, c)[i % 3].url, "list_pets", {"limit": i + 1}), range(36)))
        assert [r.status_code for r in allowed] == [200] * 36
        assert call(b.url, "delete_pet", {"petId": "1"}).status_code == 403

        # a call held for approval on A, released by a resolve on B
        held: dict[str, httpx.Response] = {}
        waiter = threading.Thread(target=lambda: held.update(r=call(a.url, "create_pet", {"name": "rex"})))
        waiter.start()
        found = wait_until(lambda: pending(b.url), timeout=20, what="the approval to be listed on instance B")
        approval = found[0]["id"]
        resolved = httpx.post(
            f"{b.url}/approvals/{approval}/approve", json={"resolved_by": "ann"}, headers=ADMIN, trust_env=False
        )
        assert resolved.status_code == 200, resolved.text
        waiter.join(30)
        assert held["r"].status_code == 200, held["r"].text
        assert held["r"].json()["approval_id"] == approval and held["r"].json()["result"] == {
            "created": {"name": "rex"}
        }

        # one chain, seen whole by every instance
        for server in (a, b, c):
            report = httpx.get(f"{server.url}/traces/verify", headers=ADMIN, trust_env=False, timeout=30).json()
            assert report.get("break") is None, report
            assert report["chained"] >= 39
        traces = httpx.get(f"{a.url}/traces", params={"limit": 1000}, headers=ADMIN, trust_env=False).json()
        assert {r.json()["trace_id"] for r in allowed} <= {t["trace_id"] for t in traces}
        health = httpx.get(f"{b.url}/health", headers=ADMIN, trust_env=False).json()
        assert health["traces"]["allowed"] >= 37 and health["traces"]["denied"] == 1
    # the state is in PostgreSQL, not in a file beside the config
    assert not (tmp_path / "flux7.db").exists()
    with psycopg.connect(postgres_url) as conn:
        approved = conn.execute(
            "SELECT status, resolved_by, resolved_note FROM approvals WHERE id = %s", (approval,)
        ).fetchone()
    assert approved == ("approved", "owner:admin-token", "ann")


@pytest.mark.served
def test_serve_with_an_unreachable_database_says_so_and_exits_2(tmp_path: Path, backend: Backend) -> None:
    url = f"postgresql://flux7:secret@127.0.0.1:{free_port()}/flux7?connect_timeout=1"
    config = pets_mesh_config(tmp_path, backend, PETS_POLICY, extra=f"database: {url}")
    done = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", str(config), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2, done.stderr
    assert "storage unavailable: cannot connect to postgresql://flux7:***@127.0.0.1" in done.stderr
    assert "secret" not in done.stderr


def test_backup_and_restore_say_litestream_is_for_sqlite_on_a_postgresql_config(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("database: postgresql://flux7@db.internal/flux7\nmemory: {enabled: false}\n")
    for run in (main, restore_main):
        err = io.StringIO()
        with redirect_stderr(err):
            code = run(["--config", str(config), "--to" if run is main else "--from", "file:///tmp/x"], env={})
        assert code == 2, err.getvalue()
        assert "on PostgreSQL back up with pg_dump" in err.getvalue()
