"""The control plane is never open without a credential by default (issue 13, item 2): with no admin token
configured, `flux7 serve` makes one in a 0600 file beside its database, keeps it across restarts, prints a console
link carrying it, and the local clients (`mesh`, sup7) read it on their own. `auth.open_loopback` keeps the old
open mode, explicitly."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from flux7.shared.auth.admin_token import FILE_NAME, cli_admin_token, effective_admin_token, load_or_create, token_file
from flux7.shared.errors import ConfigError
from flux7.shared.settings import load_settings
from flux7.shared.supervisor.cli import with_environment
from flux7.shared.supervisor.config import MeshConfig, Sup7Config
from tests.gate.servers import write_config
from tests.support.server import REPO, Server, running_server


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_file_is_made_once_0600_and_a_race_of_workers_agrees_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "data" / FILE_NAME
    with ThreadPoolExecutor(8) as pool:
        tokens = set(pool.map(lambda _: load_or_create(path), range(16)))
    assert len(tokens) == 1 and len(tokens.pop()) >= 40
    assert mode(path) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == [FILE_NAME]  # nothing left aside
    path.write_text("\n")
    with pytest.raises(ConfigError, match="the admin token file is empty"):
        load_or_create(path)  # fail closed: an emptied file is not silently replaced


def test_which_token_the_control_plane_requires(tmp_path: Path) -> None:
    db = {"storage_path": str(tmp_path / "d" / "flux7.db")}
    made = effective_admin_token(load_settings(None, env={}, **db))
    assert made == (tmp_path / "d" / FILE_NAME).read_text().strip()
    configured = load_settings(None, env={"MESH_ADMIN_TOKEN": "s3cret"}, storage_path=str(tmp_path / "e" / "x.db"))
    assert effective_admin_token(configured) == "s3cret" and not (tmp_path / "e" / FILE_NAME).exists()
    open_ = load_settings(None, env={}, storage_path=str(tmp_path / "f" / "x.db"), auth={"open_loopback": True})
    assert effective_admin_token(open_) == "" and not (tmp_path / "f" / FILE_NAME).exists()
    elsewhere = load_settings(None, env={}, **db, auth={"admin_token_file": str(tmp_path / "secrets" / "adm")})
    assert token_file(elsewhere) == tmp_path / "secrets" / "adm"
    assert effective_admin_token(elsewhere) == (tmp_path / "secrets" / "adm").read_text().strip() != made


def test_local_clients_find_the_file_and_never_send_it_off_loopback(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = load_or_create(data / FILE_NAME)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"storage_path: {data}/flux7.db\n")
    url = "http://127.0.0.1:9090"
    none = {"HOME": str(tmp_path / "home")}  # no token in the built-in defaults' data directory
    assert cli_admin_token(url, none, cwd=data) == token  # run where the server keeps its data
    assert cli_admin_token(url, {"FLUX7_CONFIG": str(cfg)}, cwd=tmp_path) == token
    assert cli_admin_token(url, none, cwd=tmp_path) == token  # ./config.yaml, found in the current folder
    configured = tmp_path / "configured.yaml"
    configured.write_text(f"storage_path: {data}/flux7.db\nauth: {{admin_token: from-config}}\n")
    assert cli_admin_token(url, {"FLUX7_CONFIG": str(configured)}, cwd=data) == "from-config"
    assert cli_admin_token(url, {"FLUX7_ADMIN_TOKEN_FILE": str(data / FILE_NAME)}, cwd=tmp_path) == token
    assert cli_admin_token("http://localhost:9090", none, cwd=data) == token
    assert cli_admin_token(url, none, cwd=tmp_path / "home") == ""  # nowhere to be found
    defaults = load_or_create(tmp_path / "home" / ".local" / "share" / "flux7" / FILE_NAME)
    assert cli_admin_token(url, none, cwd=tmp_path / "home") == defaults  # the built-in defaults' data directory
    assert cli_admin_token(url, {"MESH_ADMIN_TOKEN": "explicit"}, cwd=data) == "explicit"
    assert cli_admin_token(url, {}, explicit="flag", cwd=data) == "flag"
    assert cli_admin_token("https://mesh.example.com", {}, cwd=data) == ""  # a remote server never gets it
    config = Sup7Config(mesh=MeshConfig(url=url))
    assert with_environment(config, {"FLUX7_ADMIN_TOKEN_FILE": str(data / FILE_NAME)}).mesh.admin_token == token
    assert with_environment(config, {"MESH_ADMIN_TOKEN": "explicit"}).mesh.admin_token == "explicit"
    remote = Sup7Config(mesh=MeshConfig(url="https://mesh.example.com"))
    assert with_environment(remote, {"FLUX7_ADMIN_TOKEN_FILE": str(data / FILE_NAME)}).mesh.admin_token == ""


def mesh_cli(server: Server, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MESH_ADMIN_TOKEN", "FLUX7_CONFIG")}
    environ.update({"MESH_URL": server.url, "PYTHONPATH": str(REPO), **env})
    return subprocess.run(
        [sys.executable, "-m", "flux7.shared.cli.approvals", "pending"],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.served
@pytest.mark.usefixtures("engine_env")  # the server process runs on this test's store (its PostgreSQL database)
def test_flux7_serve_makes_keeps_and_prints_the_token_and_mesh_reads_it(tmp_path: Path) -> None:
    config = write_config(tmp_path, auth={})  # the default: no token configured, not open
    path = tmp_path / FILE_NAME
    with running_server(config) as server:
        assert mode(path) == 0o600
        token = path.read_text().strip()
        log = server.log.read_text(errors="replace")
        assert f"{server.url}/console/#token={token}" in log and str(path) in log
        grants = f"{server.url}/grants"
        assert httpx.get(grants, timeout=10, trust_env=False).status_code == 401  # loopback is not enough
        wrong = httpx.get(grants, headers={"Authorization": "Bearer agent:bot"}, timeout=10, trust_env=False)
        assert wrong.status_code == 401
        ok = httpx.get(grants, headers={"Authorization": f"Bearer {token}"}, timeout=10, trust_env=False)
        assert ok.status_code == 200
        # `mesh pending` from the data directory, and from anywhere with FLUX7_CONFIG, with no token given
        for cwd, env in ((tmp_path, {}), (REPO, {"FLUX7_CONFIG": str(config)})):
            done = mesh_cli(server, cwd, **env)
            assert (done.returncode, done.stdout) == (0, "No pending approvals.\n"), done.stderr
        refused = mesh_cli(server, tmp_path, MESH_ADMIN_TOKEN="not-it")  # an explicit token wins, even a bad one
        assert refused.returncode == 1 and "HTTP 401" in refused.stderr
        lost = mesh_cli(server, REPO)  # no token anywhere: refused, and the message says so
        assert lost.returncode == 1 and "HTTP 401" in lost.stderr
    with running_server(config) as again:  # a restart keeps the token (and the file's mode)
        assert path.read_text().strip() == token and mode(path) == 0o600
        ok = httpx.get(f"{again.url}/grants", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert ok.status_code == 200
        assert re.search(rf"console: {re.escape(again.url)}/console/#token={re.escape(token)} ", again.log.read_text())


@pytest.mark.served
@pytest.mark.usefixtures("engine_env")
def test_open_loopback_is_the_old_open_mode_and_says_so(tmp_path: Path) -> None:
    config = write_config(tmp_path)  # tests/gate/servers.py: auth.open_loopback
    with running_server(config) as server:
        assert httpx.get(f"{server.url}/grants", timeout=10, trust_env=False).status_code == 200
        assert "control plane OPEN to loopback: auth.open_loopback" in server.log.read_text()
    assert not (tmp_path / FILE_NAME).exists()
