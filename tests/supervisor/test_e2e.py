"""sup7 as a process against `flux7 serve` (granian) on loopback, with an HTTP upstream and an Ollama-speaking
LLM server: the supervisor protocol end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.supervisor import llm_servers
from tests.supervisor.conftest import POLICY, RULES
from tests.support.http import free_port, wait_until
from tests.support.mesh import pets_mesh_config
from tests.support.server import REPO, Server, running_server
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}
SUP_ADMIN = {"Authorization": "Bearer sup-t0k"}


def mesh_config(tmp_path: Path, backend: Backend) -> Path:
    extra = "supervisor: {supervisor_agents: [l1]}"
    return pets_mesh_config(tmp_path, backend, POLICY, approval_timeout=60, memory="{hybrid: false}", extra=extra)


def issue_token(config: Path, agent: str) -> str:
    """`flux7 token issue <agent>` as an operator runs it: the token on the first line of its output."""
    out = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "token", "issue", agent, "--config", str(config)],
        cwd=config.parent,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.splitlines()[0].strip()


def sup7_yaml(tmp_path: Path, mesh_url: str, llm_url: str, admin_port: int) -> Path:
    cfg = tmp_path / "sup7.yaml"
    data = {
        "supervisor": {
            "mesh": {"url": mesh_url, "agent_id": "l1"},
            "evaluator": {"provider": "ollama", "url": llm_url, "model": "qwen3:14b", "timeout": 10},
            "poll": {"interval": "100ms"},
            "rules": [*RULES, {"name": "reads", "condition": "tool starts_with get_", "action": "approve"}],
            "project_dirs": ["/home/u/proj"],
            "decision_log": str(tmp_path / "decisions.jsonl"),
            "admin": {"enabled": True, "port": admin_port, "token": "sup-t0k"},
        }
    }
    cfg.write_text(yaml.safe_dump(data))
    return cfg


@contextmanager
def sup7(config: Path, token: str = "") -> Iterator[subprocess.Popen[bytes]]:
    """sup7 with its own agent token (MESH_AGENT_TOKEN) when given, else with the mesh's admin token."""
    log = (config.parent / "sup7.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MESH_ADMIN_TOKEN": "adm1n"}
    if token:
        env["MESH_AGENT_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "flux7.shared.supervisor.cli", "-c", str(config), "start"],
        cwd=config.parent,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.close()


def start_call(pool: ThreadPoolExecutor, server: Server, tool: str, params: dict[str, Any]) -> Future[httpx.Response]:
    return pool.submit(
        httpx.post, f"{server.url}/tool/{tool}", json={"params": params}, headers=AGENT, timeout=60, trust_env=False
    )


def sup_decisions(admin_url: str) -> list[dict[str, Any]]:
    try:
        r = httpx.get(f"{admin_url}/decisions", params={"limit": 100}, headers=SUP_ADMIN, trust_env=False)
    except httpx.HTTPError:
        return []
    return list(r.json()["decisions"]) if r.status_code == 200 else []


def test_sup7_approves_by_rule_escalates_to_a_human_and_asks_the_llm(tmp_path: Path, backend: Backend) -> None:
    llm = "DECISION: APPROVE | CONFIDENCE: 0.93 | REASONING: a new pet is routine"
    admin_port = free_port()
    admin = f"http://127.0.0.1:{admin_port}"
    config = mesh_config(tmp_path, backend)
    with (
        llm_servers.ollama(llm) as (llm_url, llm_seen),
        running_server(config) as server,
        sup7(sup7_yaml(tmp_path, server.url, llm_url, admin_port), issue_token(config, "l1")) as proc,
        ThreadPoolExecutor(4) as pool,
    ):
        # 1. a rule approves: the blocked REST call returns 200
        r = start_call(pool, server, "create_pet", {"name": "Kit", "path": "/home/u/proj/kit.json"}).result(30)
        assert r.status_code == 200 and r.json()["policy"] == "human_approval", r.text
        a = httpx.get(f"{server.url}/approvals/{r.json()['approval_id']}", headers=ADMIN, trust_env=False).json()
        assert a["resolved_by"] == "supervisor:l1" and "resolved_note" not in a  # by its own credential
        assert a["reasoning"] == "rule 'project-files' matched; path=/home/u/proj/kit.json; inside the project"

        # 2. a sensitive path escalates; a human's denial returns 403 naming the human
        call = start_call(pool, server, "create_pet", {"name": "Kit", "path": "/home/u/proj/.ssh/id_rsa"})
        wait_until(lambda: any(d["decision"] == "escalated" for d in sup_decisions(admin)), timeout=20)
        [p] = httpx.get(f"{server.url}/approvals?status=pending", headers=ADMIN, trust_env=False).json()
        assert not call.done()
        httpx.post(
            f"{server.url}/approvals/{p['id']}/deny", json={"resolved_by": "alice"}, headers=ADMIN, trust_env=False
        )
        denied = call.result(30)
        assert denied.status_code == 403 and denied.json()["error"] == "approval denied by owner:admin-token"

        # 3. no rule but the catch-all: the LLM decides
        r = start_call(pool, server, "create_pet", {"name": "Rex"}).result(30)
        assert r.status_code == 200
        a = httpx.get(f"{server.url}/approvals/{r.json()['approval_id']}", headers=ADMIN, trust_env=False).json()
        assert a["reasoning"] == "[ollama] a new pet is routine" and a["confidence"] == 0.93
        assert json.loads(llm_seen[-1]["body"])["model"] == "qwen3:14b"

        # 4. sup7's approvals of a read tool are not precedents: the fourth read still goes through sup7
        for _i in range(4):
            r = start_call(pool, server, "get_pet_by_id", {"petId": "1"}).result(30)
            assert r.status_code == 200 and r.json()["policy"] == "human_approval"
            assert r.json()["approval_id"]
        table = httpx.get(f"{server.url}/approvals/precedents", headers=ADMIN, trust_env=False).json()
        [row] = [p for p in table["precedents"] if p["tool"] == "get_pet_by_id"]
        assert row["human_approved"] == 0 and row["other_approved"] == 4 and row["would_auto_approve"] is False

        status = httpx.get(f"{admin}/status", headers=SUP_ADMIN, trust_env=False).json()
        assert status["state"] == "running" and status["mesh"]["reachable"] is True
        assert status["decisions"]["approved"] == 6 and status["decisions"]["escalated"] == 1
        assert httpx.get(f"{admin}/status", trust_env=False).status_code == 401
        assert proc.poll() is None
    lines = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [x["decision"] for x in lines].count("approved") == 6


def test_sup7_status_reports_the_mesh(tmp_path: Path, backend: Backend) -> None:
    with running_server(mesh_config(tmp_path, backend)) as server:
        cfg = sup7_yaml(tmp_path, server.url, "http://127.0.0.1:9", free_port())
        args = [sys.executable, "-m", "flux7.shared.supervisor.cli", "-c", str(cfg), "status"]
        env = {**os.environ, "PYTHONPATH": str(REPO), "MESH_ADMIN_TOKEN": "adm1n"}
        ok = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok.stderr
        report = json.loads(ok.stdout)
        assert report["mesh"]["reachable"] is True and report["pending"] == 0
        assert report["rules"][-1] == "default"
        assert report["mcp_server"] == {"enabled": False}
        via_flux7 = [sys.executable, "-m", "flux7.functions.entry", "supervisor", "-c", str(cfg), "status"]
        same = subprocess.run(via_flux7, env=env, capture_output=True, text=True, timeout=60)
        assert same.returncode == 0 and json.loads(same.stdout)["mesh"]["reachable"] is True
        env.pop("MESH_ADMIN_TOKEN")
        refused = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 0 and "pending_error" in json.loads(refused.stdout)
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [{name: x, condition: 'tool resembles y'}]")
    out = subprocess.run(
        [sys.executable, "-m", "flux7.shared.supervisor.cli", "-c", str(bad), "status"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "rules[0].condition" in out.stderr
