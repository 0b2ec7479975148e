"""From a first run to the commands a newcomer types next, against the server the README starts
(`flux7 serve --config config.example.yaml`, a copy of the checkout's on a free port): every command finds that
server's database and admin token, or says which file it used and why, and an error names the fix that works."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.checkout import data_dir, readme_checkout, terminal_env
from tests.support.http import free_port
from tests.support.server import healthy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.served

MODULE = {
    "flux7": "flux7.functions.entry",
    "mesh7": "flux7.functions.entry",
    "mem7": "flux7.functions.entry",
    "mesh": "flux7.shared.cli.approvals",
}


def run(name: str, *args: str, cwd: Path, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """A command as its console script runs it (`mesh7 …` and `mem7 …` through the entry point's own names)."""
    if name in ("mesh7", "mem7"):
        code = f"from flux7.functions.entry import {name}_main as m; raise SystemExit(m())"
        argv = [sys.executable, "-c", code, *args]
    else:
        argv = [sys.executable, "-m", MODULE[name], *args]
    return subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=120)


class Readme:
    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.home = root / "home"
        self.checkout = readme_checkout(root, self.port)
        self.env = terminal_env(self.home)
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = (self.checkout / "config.example.yaml").resolve()

    def call(self, tool: str, bearer: str, args: list[str]) -> httpx.Response:
        return httpx.post(
            f"{self.url}/tool/{tool}",
            json={"params": {"args": args}},
            headers={"Authorization": f"Bearer {bearer}"},
            trust_env=False,
            timeout=30,
        )


@pytest.fixture
def readme(tmp_path: Path) -> Iterator[Readme]:
    """The README's server: `scripts/serve`'s command in the checkout, with the terminal's home."""
    r = Readme(tmp_path)
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "flux7.functions.entry", "serve", "--config", "config.example.yaml"],
        cwd=r.checkout,
        env=r.env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: proc.poll() is not None or healthy(r.url), timeout=60, what="the README's server")
        assert proc.poll() is None, log.read_text()
        yield r
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_the_readme_server_keeps_its_state_in_the_per_user_data_directory(readme: Readme) -> None:
    data = data_dir(readme.home)
    assert (data / "flux7.db").is_file() and (data / "flux7-admin.token").is_file()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    state = {"flux7.db", "flux7-admin.token", "decisions.key", "memory", "traces.jsonl", "data"}
    assert not state & {p.name for p in readme.checkout.iterdir()}  # nothing an agent working here could read


def test_a_token_issued_in_a_new_terminal_is_one_the_readme_server_accepts(readme: Readme) -> None:
    issued = run("flux7", "token", "issue", "demo", cwd=readme.checkout, env=readme.env)  # no FLUX7_CONFIG
    assert issued.returncode == 0, issued.stderr
    assert f"config: the built-in defaults, state in {data_dir(readme.home)}" in issued.stderr
    token = issued.stdout.strip()
    assert readme.call("clock.run", token, ["-u"]).status_code == 200
    assert not (readme.checkout / "flux7.db").exists()
    users = run("flux7", "user", "add", "ann", "--role", "approver", cwd=readme.checkout, env=readme.env)
    assert users.returncode == 0, users.stderr  # `flux7 user` follows the same rule
    assert run("mesh", "pending", cwd=readme.home, env={**readme.env, "MESH_URL": readme.url}).returncode == 0


def test_a_command_refuses_to_create_a_database_no_server_reads_and_says_where_it_looked(
    readme: Readme, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = terminal_env(tmp_path / "other-home")  # another account, or XDG_DATA_HOME pointing elsewhere
    for command in (["token", "issue", "demo"], ["user", "add", "ann", "--role", "viewer"], ["token", "list"]):
        done = run("flux7", *command, cwd=elsewhere, env=other)
        assert done.returncode == 2, done.stdout + done.stderr
        line = done.stderr.splitlines()[-1]
        assert f"no database at {data_dir(tmp_path / 'other-home')}/flux7.db" in line, done.stderr
        assert "FLUX7_CONFIG" in line and "./config.yaml" in line and "config.example.yaml" in line
    assert not data_dir(tmp_path / "other-home").exists() and not list(elsewhere.iterdir())
    named = run("flux7", "token", "issue", "demo", "--config", str(readme.config), cwd=elsewhere, env=other)
    assert named.returncode == 0 and "config:" not in named.stderr  # a config the user names is used as named


def test_a_found_config_for_another_database_is_refused_naming_the_servers_config(readme: Readme) -> None:
    (readme.checkout / "config.yaml").write_text(f"port: {readme.port}\nstorage_path: mine/flux7.db\n")
    done = run("flux7", "token", "issue", "demo", cwd=readme.checkout, env=readme.env)
    assert done.returncode == 2, done.stderr
    assert f"runs {readme.config}" in done.stderr and f"pass --config {readme.config}" in done.stderr
    assert not (readme.checkout / "mine").exists()
    chosen = run("flux7", "token", "list", "--config", "config.yaml", cwd=readme.checkout, env=readme.env)
    assert chosen.returncode == 0 and "note: the flux7 server" in chosen.stderr  # named: used, with a note


def test_control_plane_commands_find_the_admin_token_or_name_the_fix(readme: Readme, tmp_path: Path) -> None:
    env = {**readme.env, "MESH_URL": readme.url}
    ok = run("mesh", "pending", cwd=tmp_path, env=env)  # no FLUX7_CONFIG, another folder: the same data dir
    assert (ok.returncode, ok.stdout) == (0, "No pending approvals.\n"), ok.stderr
    governance = run("flux7", "governance", "catalog", cwd=tmp_path, env=env)
    assert governance.returncode == 0 and "AGENT" in governance.stdout, governance.stderr

    lost = {**terminal_env(tmp_path / "other-home"), "MESH_URL": readme.url}  # no token to be found
    refused = run("mesh", "pending", cwd=readme.checkout, env=lost)
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr
    assert f"export FLUX7_CONFIG={readme.config}" in refused.stderr, refused.stderr
    assert "MESH_URL" not in refused.stderr
    refused = run("flux7", "governance", "scores", cwd=readme.checkout, env=lost)
    assert refused.returncode == 1 and refused.stderr.startswith("flux7 governance scores: ")
    assert f"export FLUX7_CONFIG={readme.config}" in refused.stderr and "mesh:" not in refused.stderr
    unknown = run("mesh", "pending", cwd=tmp_path, env=lost)  # nothing names the server's config here
    assert "no admin token found (looked in" in unknown.stderr and "config.example.yaml" in unknown.stderr
    wrong = run("mesh", "pending", cwd=tmp_path, env={**env, "MESH_ADMIN_TOKEN": "not-it"})
    assert "the server refused MESH_ADMIN_TOKEN" in wrong.stderr


def _mcp(*lines: dict[str, object]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


HANDSHAKE = _mcp(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
)


def _tools(stdout: str) -> list[str]:
    answers = [json.loads(line) for line in stdout.splitlines()]
    listed = next(a for a in answers if a.get("id") == 2)
    return [t["name"] for t in listed["result"]["tools"]]


def test_the_mcp_stdio_server_honours_flux7_config_and_keeps_state_out_of_the_folder(tmp_path: Path) -> None:
    port = free_port()
    checkout = readme_checkout(tmp_path, port)
    work = tmp_path / "project"  # the folder an MCP client starts the server in
    work.mkdir()
    home = tmp_path / "home"
    env = terminal_env(home, FLUX7_CONFIG=str(checkout / "config.example.yaml"))
    for name, args in (("flux7", ["mcp"]), ("mesh7", ["--mcp"])):
        done = run(name, *args, cwd=work, env=env, stdin=HANDSHAKE)
        assert done.returncode == 0, done.stderr
        assert {"clock.run", "files.run", "dirs.run"} <= set(_tools(done.stdout)), done.stdout
    assert list(work.iterdir()) == []  # no decisions.key, memory/ or database in the client's folder
    assert (data_dir(home) / "flux7.db").is_file()

    bare = run("mesh7", "--mcp", "--port", str(free_port()), cwd=work, env=terminal_env(home), stdin=HANDSHAKE)
    assert bare.returncode == 0, bare.stderr
    assert f"config: the built-in defaults, state in {data_dir(home)}" in bare.stderr
    assert "no tools are configured: pass --config FILE" in bare.stderr
    assert list(work.iterdir()) == [] and stat.S_IMODE(data_dir(home).stat().st_mode) == 0o700


def test_memory_from_the_terminal_reaches_the_readme_servers_memory(readme: Readme) -> None:
    args = ("--config", str(readme.config))
    stored = run(
        "mem7", "store", "deploy-window", "Deploys on Tuesdays.", "--tag", "ops", *args, cwd=readme.home, env=readme.env
    )
    assert (stored.returncode, stored.stdout) == (0, "Memory 'deploy-window' created (1 total entries)\n"), (
        stored.stderr
    )
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    params = {"name": "memory_recall", "arguments": {"key": "deploy-window"}}
    recalled = httpx.post(f"{readme.url}/rpc", json={**rpc, "params": params}, trust_env=False, timeout=30).json()
    assert "Deploys on Tuesdays." in recalled["result"]["content"][0]["text"]  # in the server's own memory
    found = run("flux7", "memory", "search", "when do we deploy", "--json", *args, cwd=readme.home, env=readme.env)
    assert found.returncode == 0, found.stderr
    assert [m["key"] for m in json.loads(found.stdout)] == ["deploy-window"]
    forgot = run("mem7", "forget", "deploy-window", "--json", *args, cwd=readme.home, env=readme.env)
    assert json.loads(forgot.stdout) == {"removed": 1, "remaining": 0}

    # `mem7` on stdio relays to a daemon answering at MEM7_LISTEN without an "HTTP Request" line per message
    relay_env = {**readme.env, "MEM7_LISTEN": f"127.0.0.1:{readme.port}"}
    listed = run(
        "mem7", cwd=readme.home, env=relay_env, stdin=_mcp({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    )
    assert listed.returncode == 0 and "memory_store" in listed.stdout, listed.stderr
    assert "relaying stdio" in listed.stderr and "HTTP Request" not in listed.stderr
