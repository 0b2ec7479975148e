"""Fixtures for the MCP transports: configs, a real daemon process on loopback, SDK clients."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.http import free_port
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
MESH7 = "from flux7.functions.entry import mesh7_main; raise SystemExit(mesh7_main())"
ECHO_SERVER = REPO / "tests" / "upstreams" / "servers" / "mcp_echo.py"

# claude: the everyday agent; boss: a supervisor agent (supervisor_agents); others fall to the default deny.
POLICIES = """
policies:
  - name: claude
    agent: claude
    rules:
      - tools: ["echo.echo", "echo.search", "echo.broken", "echo.fail", "echo.whoami", "say.run", "ppid.run"]
        action: allow
      - tools: ["echo.write_file", "rm.run"]
        action: deny
      - tools: ["echo.read_file", "secret.run"]
        action: human_approval
  - name: boss
    agent: boss
    rules:
      - tools: ["*"]
        action: allow
"""

# CLI tools start no process until called, so in-process tests that use only them start in milliseconds.
CLI_TOOLS = """
cli_tools:
  - {name: say, bin: /bin/echo, bare: {timeout: 5s}}
  - {name: secret, bin: /bin/echo, bare: {timeout: 5s}}
  - {name: rm, bin: /bin/echo, bare: {timeout: 5s}}
  - {name: ppid, bin: /bin/sh, bare: {timeout: 5s}}
"""


def echo_server(name: str = "echo", env: dict[str, str] | None = None) -> str:
    lines = [
        f"  - name: {name}",
        "    transport: stdio",
        f"    command: {sys.executable}",
        f"    args: ['{ECHO_SERVER}']",
        "    forward_identity: true",
    ]
    if env:
        lines.append("    env: {" + ", ".join(f"{k}: '{v}'" for k, v in env.items()) + "}")
    return "\n".join(lines)


SUPERVISOR = '{auto_approve: false, supervisor_agents: ["boss"]}'


def write_config(
    tmp: Path,
    *,
    mcp: bool = True,
    extra: str = "",
    echo_env: dict[str, str] | None = None,
    name: str = "config.yaml",
    supervisor: str = SUPERVISOR,
) -> Path:
    servers = f"mcp_servers:\n{echo_server(env=echo_env)}\n" if mcp else ""
    if "auth:" not in extra:  # the control plane open to loopback, unless the test configures auth itself
        extra = "auth: {open_loopback: true}\n" + extra
    cfg = tmp / name
    cfg.write_text(
        f"""
storage_path: {tmp}/flux7.db
approval: {{timeout_seconds: 60, channel: queue}}
memory: {{enabled: false}}
supervisor: {supervisor}
{servers}{CLI_TOOLS}{POLICIES}{extra}
"""
    )
    return cfg


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=0.5, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


class Daemon:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def tools_ready(self, count: int) -> bool:
        return httpx.get(f"{self.url}/health", trust_env=False).json()["tools"] >= count


@contextmanager
def run_daemon(config: Path, *, workers: int = 1, port: int | None = None, tools: int = 0) -> Iterator[Daemon]:
    """`mesh7 serve` as a real process (granian) on loopback; stopped at exit."""
    port = port or free_port()
    log = open(config.parent / f"daemon-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-c", MESH7, "serve", "--config", str(config), "--port", str(port), "--workers", str(workers)],
        cwd=config.parent,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    daemon = Daemon(proc, port)
    try:
        wait_until(lambda: proc.poll() is not None or healthy(daemon.url), 20, "the daemon")
        if proc.poll() is not None:
            raise AssertionError((config.parent / f"daemon-{port}.log").read_text())
        if tools:
            wait_until(lambda: daemon.tools_ready(tools), 20, f"{tools} tools")
        yield daemon
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.close()


APPROVAL_URL = re.compile(r"POST /approvals/([0-9a-f]{16})/approve")


def approval_id_in(text: str) -> str:
    m = APPROVAL_URL.search(text)
    assert m, f"no approval id in {text!r}"
    return m.group(1)


@pytest.fixture(autouse=True)
def _every_mesh_shares_the_engine(engine_env: str) -> str:
    """In-process meshes (load_settings reads the environment) and daemons use this test's PostgreSQL database
    under `--engine=postgresql`."""
    return engine_env


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
