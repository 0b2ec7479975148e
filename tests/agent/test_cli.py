"""`flux7 agent` as a user runs it: a real `flux7 serve` process, a streaming model on loopback, the CLI as a
subprocess (one prompt with -p, and the REPL over stdin)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.conftest import ADMIN, write_mesh_config
from tests.agent.llm_stream_servers import anthropic_stream
from tests.agent.test_agent import call_then_report
from tests.support.server import REPO, running_server
from tests.support.waiting import wait_until
from tests.upstreams.servers.http_backend import Backend

pytestmark = pytest.mark.served


def agent_env(llm_url: str, home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the agent's own variables, a home of the test's own (its config and saved
    sessions), then the stand-in model's URL and key."""
    drop = ("FLUX7_", "MESH_", "ANTHROPIC_", "OPENAI_", "XDG_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    home.mkdir(parents=True, exist_ok=True)
    return {
        **env,
        "HOME": str(home),
        "PYTHONPATH": str(REPO),
        "FLUX7_LLM_URL": llm_url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        **(extra or {}),
    }


def agent_cli(
    args: list[str],
    llm_url: str,
    home: Path,
    *,
    stdin: str = "",
    extra_env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    workdir = cwd or home / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", "agent", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=agent_env(llm_url, home, extra_env),
        cwd=workdir,
        timeout=90,
    )


def test_one_prompt_answers_on_stdout_and_shows_the_governed_call_on_stderr(tmp_path: Path, backend: Backend) -> None:
    with (
        anthropic_stream(call_then_report("list_pets", {"limit": 2})) as llm,
        running_server(write_mesh_config(tmp_path, backend)) as server,
    ):
        done = agent_cli(
            [
                "-p",
                "Which pets are there?",
                "--mesh",
                server.url,
                "--model",
                "claude-x",
                "--agent-id",
                "cli-agent",
                "--session",
                "cli-session",
            ],
            llm.url,
            tmp_path / "home",
        )
        sessions = httpx.get(f"{server.url}/sessions/cli-session", headers=ADMIN, trust_env=False).json()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Calling list_pets.") and "The tool said:" in done.stdout and "Rex" in done.stdout
    assert '→ list_pets {"limit": 2}' in done.stderr
    assert "← allow · trace" in done.stderr
    assert [(t["agent_id"], t["tool"], t["policy"]) for t in sessions] == [("cli-agent", "list_pets", "allow")]
    assert llm.bodies[0]["model"] == "claude-x"  # provider chosen from ANTHROPIC_API_KEY, model from the flag


def test_the_repl_keeps_the_conversation_and_answers_its_commands(tmp_path: Path, backend: Backend) -> None:
    with (
        anthropic_stream(lambda body: [("text", f"turn {len(body['messages'])}")]) as llm,
        running_server(write_mesh_config(tmp_path, backend)) as server,
    ):
        done = agent_cli(
            ["--mesh", server.url, "--session", "repl-1"],
            llm.url,
            tmp_path / "home",
            stdin="/tools\nhello\n/session\nagain\n/nope\n/clear\nfresh\n/exit\nnever sent\n",
            extra_env={"FLUX7_LLM_MODEL": "claude-y"},
        )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "list_pets" in out and "delete_pet" in out  # /tools
    assert "turn 1" in out and "turn 3" in out  # the second prompt saw the first exchange
    assert "repl-1" in out  # /session
    assert "unknown command /nope" in done.stderr
    assert "conversation cleared" in out and out.rstrip().endswith("turn 1")  # /clear started over
    assert [len(b["messages"]) for b in llm.bodies] == [1, 3, 1]  # nothing after /exit


def test_missing_model_is_a_usage_error(tmp_path: Path) -> None:
    done = agent_cli(["-p", "hi"], "http://127.0.0.1:9", tmp_path / "home")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        'flux7 agent: config error: no model: pass --model, set FLUX7_LLM_MODEL, or put model = "..." in agent.toml'
    )


def test_an_unreachable_model_exits_1_with_the_reason(tmp_path: Path, backend: Backend) -> None:
    with running_server(write_mesh_config(tmp_path, backend)) as server:
        done = agent_cli(["-p", "hi", "--mesh", server.url, "--model", "m"], "http://127.0.0.1:9", tmp_path / "home")
    assert done.returncode == 1
    assert "error: " in done.stderr and "ConnectError" in done.stderr


def test_a_call_held_for_approval_shows_it_waits_until_a_human_approves(tmp_path: Path, backend: Backend) -> None:
    with (
        anthropic_stream(call_then_report("create_pet", {"name": "Kit"})) as llm,
        running_server(write_mesh_config(tmp_path, backend)) as server,
    ):
        args = ["-p", "Add Kit", "--mesh", server.url, "--model", "m", "--agent-id", "cli-agent"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "flux7.functions.entry", "agent", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=agent_env(llm.url, tmp_path / "home"),
            cwd=tmp_path,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        try:
            wait_until(lambda: any(line.startswith("… waiting for the mesh") for line in lines), timeout=30)
            held = httpx.get(f"{server.url}/approvals", headers=ADMIN, trust_env=False).json()
            assert [(a["agent_id"], a["tool"]) for a in held] == [("cli-agent", "create_pet")]
            approve = httpx.post(f"{server.url}/approvals/{held[0]['id']}/approve", headers=ADMIN, trust_env=False)
            assert approve.status_code == 200
            assert proc.stdout is not None
            out = proc.stdout.read()  # until the agent exits (the reader thread owns stderr)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        reader.join(5)
    assert proc.returncode == 0, "".join(lines)
    assert "The tool said:" in out
    assert any(line.startswith(f"← human_approval · approval {held[0]['id'][:8]}") for line in lines)


def test_the_repl_reads_multi_line_prompts_and_switches_models(tmp_path: Path, backend: Backend) -> None:
    def echo(body: dict[str, Any]) -> list[tuple[str, ...]]:
        return [("text", "ok")]

    with (
        anthropic_stream(echo) as llm,
        running_server(write_mesh_config(tmp_path, backend)) as server,
    ):
        stdin = 'one \\\ntwo\n"""\nthree\n\nfour\n"""\n/model openai:gpt-x\n/model claude-z\nlast\n'
        done = agent_cli(["--mesh", server.url, "--model", "claude-y"], llm.url, tmp_path / "home", stdin=stdin)
    assert done.returncode == 0, done.stderr
    prompts = [[m["content"] for m in b["messages"] if m["role"] == "user"][-1] for b in llm.bodies]
    assert prompts == ["one \ntwo", "three\n\nfour", "last"]
    assert [b["model"] for b in llm.bodies] == ["claude-y", "claude-y", "claude-z"]
    assert "no API key for openai: set OPENAI_API_KEY" in done.stderr  # the switch was refused, nothing changed
    assert "model: anthropic:claude-z" in done.stdout
