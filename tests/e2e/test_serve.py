"""`flux7 serve` under granian: several workers behave as one process, and acknowledged writes survive kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.functions.conftest import AGENT, POLICY, make_config
from tests.support.mesh import pets_mesh_config
from tests.support.server import REPO, running_server, start_server, stop_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served


def call(url: str, tool: str, params: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{url}/tool/{tool}", json={"params": params}, headers=AGENT, timeout=30, trust_env=False)


def test_two_workers_share_traces_chain_and_metrics(tmp_path: Path, backend: Backend, engine_configs: str) -> None:
    cfg = make_config(tmp_path, backend)
    with running_server(cfg, workers=2) as server:
        with ThreadPoolExecutor(8) as pool:
            # separate connections spread the calls over both workers
            results = list(pool.map(lambda i: call(server.url, "list_pets", {"limit": i}), range(40)))
        assert all(r.status_code == 200 for r in results)
        denied = call(server.url, "delete_pet", {"petId": "1"})
        assert denied.status_code == 403
        traces = httpx.get(f"{server.url}/traces", params={"limit": 1000}, trust_env=False).json()
        assert {r.json()["trace_id"] for r in results} <= {t["trace_id"] for t in traces}
        report = httpx.get(f"{server.url}/traces/verify", trust_env=False).json()
        assert report.get("break") is None and report["chained"] >= 41
        health = httpx.get(f"{server.url}/health", trust_env=False).json()
        assert health["traces"]["allowed"] >= 40 and health["traces"]["denied"] >= 1

        def calls() -> dict[str, float]:
            text = httpx.get(f"{server.url}/metrics", trust_env=False).text
            return {
                s.labels.get("action"): s.value
                for f in text_string_to_metric_families(text)
                if f.name == "agent_mesh_calls"
                for s in f.samples
                if s.name == "agent_mesh_calls_total"
            }

        # each worker writes its series within metrics.FLUSH_SECONDS: the sum of both, nothing lost or doubled
        counted = wait_until(lambda: (c := calls())["allow"] >= 40 and c["deny"] >= 1 and c, what="both workers")
        assert counted["allow"] == 40 and counted["deny"] == 1
    if engine_configs:  # PostgreSQL: no trace file, the one chain is in the database (verified above)
        return
    verify = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "trace", "verify", str(tmp_path / "traces.jsonl")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_acknowledged_calls_grants_and_pending_approvals_survive_kill_9(
    tmp_path: Path, backend: Backend, engine_configs: str
) -> None:
    cfg = make_config(tmp_path, backend)
    server = start_server(cfg, workers=2)
    acknowledged: list[str] = []
    try:
        for i in range(25):
            r = call(server.url, "list_pets", {"limit": i})
            assert r.status_code == 200
            acknowledged.append(r.json()["trace_id"])
        grant = httpx.post(
            f"{server.url}/grants",
            json={"agent": "claude", "tools": "create_pet", "duration": "1h"},
            trust_env=False,
        )
        assert grant.status_code == 201
        server.kill9()
    finally:
        stop_server(server)
    with running_server(cfg, workers=1) as again:
        traces = httpx.get(f"{again.url}/traces", params={"limit": 1000}, trust_env=False).json()
        assert set(acknowledged) <= {t["trace_id"] for t in traces}
        grants = httpx.get(f"{again.url}/grants", trust_env=False).json()
        assert [g["id"] for g in grants] == [grant.json()["id"]]
        # the grant still lifts human_approval after the restart
        r = call(again.url, "create_pet", {"name": "Kit"})
        assert r.status_code == 200 and r.json()["policy"] == "allow"
        assert httpx.get(f"{again.url}/traces/verify", trust_env=False).json().get("break") is None


def test_sigterm_stops_the_server_while_a_call_waits_for_a_human(
    tmp_path: Path, backend: Backend, engine_configs: str
) -> None:
    # granian waits for every request in flight; a call held for a human (here up to 10 minutes) must not hold
    # the stop past stop_timeout_seconds (2 here, 10 by default), and the approval it waits for outlives the stop.
    cfg = pets_mesh_config(
        tmp_path,
        backend,
        POLICY,
        approval_timeout=600,
        admin_token=None,
        trace_file=True,
        extra="stop_timeout_seconds: 2",
    )
    server = start_server(cfg, workers=2)

    def pending(url: str) -> list[dict[str, object]]:
        return httpx.get(f"{url}/approvals", params={"status": "pending"}, trust_env=False).json()

    try:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(
                httpx.post,
                f"{server.url}/tool/create_pet",
                json={"params": {"name": "Kit"}},
                headers=AGENT,
                timeout=120,  # longer than the stop may take: the server, not the client, ends the wait
                trust_env=False,
            )
            [approval] = wait_until(lambda: pending(server.url), what="the call queued for a human")
            os.killpg(server.proc.pid, signal.SIGTERM)
            # TimeoutExpired: the stop waited on the held call, or for the default 10 s rather than the 2 set
            server.proc.wait(8)
            with pytest.raises(httpx.TransportError):
                held.result()
    finally:
        stop_server(server)
    with running_server(cfg) as again:
        assert [a["id"] for a in pending(again.url)] == [approval["id"]]
        assert httpx.get(f"{again.url}/traces/verify", trust_env=False).json().get("break") is None


def test_bad_config_stops_the_start_naming_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("approval:\n  timeout: 5\n")
    r = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 2
    assert str(cfg) in r.stderr and "approval" in r.stderr and "timeout" in r.stderr


def test_refuses_to_bind_off_loopback_without_an_admin_token(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("host: 0.0.0.0\n")
    r = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 2 and "admin token" in r.stderr
