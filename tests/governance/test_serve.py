"""The walk-through of docs/governance.md against a real `flux7 serve` (granian on loopback), driven by the
`flux7 governance` CLI: declare an agent, let it run, read its verdict, propose a policy change, replay it,
apply it, suspend the agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.governance.support import governed_config
from tests.support.server import REPO, Server, running_server
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served

CLAUDE = """
id: claude
name: Claude the pet clerk
owner: alice@example.com
team: pets
purpose: answer questions about pets
tools: [list_pets, get_pet_by_id]
upstreams: [spec.json]
autonomy: supervised
"""
TIGHTER = """
name: agents
agent: "*"
rules:
  - tools: ["delete_pet", "get_boom"]
    action: deny
  - tools: ["create_pet"]
    action: human_approval
  - tools: ["*"]
    action: allow
"""


def flux7(server: Server, *args: str, cwd: Path) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MESH_URL": server.url, "MESH_ADMIN_TOKEN": "adm1n"}
    done = subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "governance", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def rest(server: Server, who: str, tool: str, params: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        f"{server.url}/tool/{tool}",
        json={"params": params or {}},
        headers={"Authorization": f"Bearer agent:{who}"},
        trust_env=False,
        timeout=30,
    )


def test_the_walk_through_on_a_real_server(tmp_path: Path, backend: Backend) -> None:
    config = governed_config(tmp_path, backend, catalog="agents: []\n")
    (tmp_path / "claude.yaml").write_text(CLAUDE)
    (tmp_path / "proposed").mkdir()
    (tmp_path / "proposed" / "agents.yaml").write_text(TIGHTER)
    with running_server(config) as server:
        # 1. declare the agent (it starts as proposed), then make it active
        code, out, err = flux7(server, "catalog-put", "claude", "claude.yaml", cwd=tmp_path)
        assert code == 0, err
        code, out, err = flux7(server, "lifecycle", "claude", "active", "--reason", "reviewed", cwd=tmp_path)
        assert code == 0, err
        assert "claude: proposed -> active" in out

        # 2. let it run
        assert rest(server, "claude", "list_pets").status_code == 200
        assert rest(server, "claude", "get_boom").status_code == 502
        assert rest(server, "claude", "get_boom").status_code == 502
        assert rest(server, "stranger", "list_pets").status_code == 200

        # 3. read its verdict
        code, out, err = flux7(server, "evaluate", cwd=tmp_path)
        assert code == 0, err
        lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
        assert lines["claude"][1] == "active" and lines["stranger"][1] == "discovered"
        assert lines["stranger"][-1] == "fail"  # undeclared
        code, out, err = flux7(server, "agent", "claude", cwd=tmp_path)
        assert code == 0, err
        assert "declared-drift" in out and "fix: declare the tools it needs" in out
        code, out, err = flux7(server, "catalog", cwd=tmp_path)
        assert "stranger" in out and "discovered" in out

        # 4. propose a policy change and replay it against the traffic so far
        code, out, err = flux7(server, "replay", "proposed/agents.yaml", "--days", "1", cwd=tmp_path)
        assert code == 0, err
        assert "would change" in out and "allow -> deny" in out and "get_boom" in out
        code, out, err = flux7(server, "replay", "proposed/agents.yaml", "--days", "1", "--json", cwd=tmp_path)
        report = json.loads(out)
        assert report["changed"] == 2 and {g["tool"] for g in report["groups"]} == {"get_boom"}

        # 5. save it as a draft, replay the draft, apply it: live decisions follow
        assert flux7(server, "draft", "no-boom", "proposed/agents.yaml", cwd=tmp_path)[0] == 0
        code, out, err = flux7(server, "replay", "--draft", "no-boom", "--json", cwd=tmp_path)
        assert json.loads(out)["changed"] == 2
        code, out, err = flux7(server, "apply", "no-boom", cwd=tmp_path)
        assert code == 0, err
        assert rest(server, "claude", "get_boom").status_code == 403
        code, out, err = flux7(server, "diff", "policy", "agents.yaml", cwd=tmp_path)
        assert code == 0, err
        assert "breaking  permission_narrowed" in out and "claude -> get_boom" in out

        # 6. impact, then suspend the agent: refused before any policy, on this real server
        code, out, err = flux7(server, "impact", "tool", "get_boom", cwd=tmp_path)
        assert code == 0 and "claude" in out
        code, out, err = flux7(server, "lifecycle", "claude", "suspended", "--reason", "incident 42", cwd=tmp_path)
        assert code == 0, err
        refused = rest(server, "claude", "list_pets")
        assert refused.status_code == 403 and "incident 42" in refused.json()["error"]

        # errors are clear, with a non-zero exit
        code, out, err = flux7(server, "lifecycle", "claude", "suspended", "--reason", "again", cwd=tmp_path)
        assert code == 1 and "HTTP 409" in err
        code, out, err = flux7(server, "replay", "missing.yaml", cwd=tmp_path)
        assert code == 1 and "missing.yaml" in err
