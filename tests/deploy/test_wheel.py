"""The wheel is the whole product: `pip wheel` of the repository, installed with its dependencies into a fresh
virtual environment outside the repository, runs every command with nothing from the checkout on its path.

The venv has no system site-packages: every dependency comes from the package index through pip, as on a user's
machine (about half a minute with a warm index; the measurement is in the report of issue 14)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from mcp import StdioServerParameters
from mcp.client import Client

from tests.support.http import free_port
from tests.support.server import REPO, healthy
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.served, pytest.mark.slow]

# What `pip wheel .` reads: the project file, the flux7/ package (symlinks to the folders below) and the folders.
SOURCES = (
    *("pyproject.toml", "README.md", "scripts/build_backend.py", "flux7", "shared", "functions", "migrations"),
    *("policies", "console-spa/dist"),
)


@dataclass
class Installed:
    wheel: Path
    venv: Path
    cwd: Path  # an empty folder outside the repository, where the commands run
    env: dict[str, str]
    src: Path  # the copy of the repository the wheel was built from
    build_output: str  # what `pip wheel` printed

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=timeout)


def _clean_env(home: Path) -> dict[str, str]:
    """The environment without anything that points into the checkout or configures flux7."""
    dropped = ("PYTHON", "FLUX7_", "MEM7_", "MESH_", "VIRTUAL_ENV", "SUP7_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    return {**env, "HOME": str(home), "NO_PROXY": "*"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for name in SOURCES:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_dir():
            # symlinks stay symlinks (flux7/shared -> ../shared), so the copy builds as the repository does
            shutil.copytree(REPO / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    env = _clean_env(root)
    pip = ("-m", "pip", "--disable-pip-version-check", "-q")
    built = subprocess.run(  # not quiet: what the build backend warns about is part of what is checked
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "wheel",
            "--no-deps",
            "-w",
            str(root / "dist"),
            str(src),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    build_output = built.stdout + built.stderr
    (wheel,) = (root / "dist").glob("flux7-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "python"), *pip, "install", str(wheel)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    cwd = root / "run"
    cwd.mkdir()
    yield Installed(wheel, venv, cwd, env, src, build_output)


def test_the_wheel_installs_one_import_package_with_its_data(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"flux7", "flux7-0.1.0.dist-info"}
    dist_info = "flux7-0.1.0.dist-info"
    assert zipfile.ZipFile(installed.wheel).read(f"{dist_info}/top_level.txt").decode().split() == ["flux7"]
    for migration in (REPO / "migrations").glob("*.sql"):
        assert f"flux7/migrations/{migration.name}" in names
    for policy in (REPO / "policies").glob("*.yaml"):
        assert f"flux7/policies/{policy.name}" in names
    for asset in (REPO / "console-spa" / "dist").rglob("*"):
        if asset.is_file():
            assert f"flux7/console/{asset.relative_to(REPO / 'console-spa' / 'dist').as_posix()}" in names
    assert "flux7/shared/memory/models/all-MiniLM-L6-v2/tokenizer.json" in names
    # the interpreter of the venv imports flux7 from the venv, and neither `shared` nor `functions` exists there
    probe = installed.run(
        installed.bin("python"),
        "-c",
        "import importlib.util as u, flux7, flux7.functions.entry; "
        "print(flux7.__file__); print(u.find_spec('shared'), u.find_spec('functions'))",
    )
    assert probe.returncode == 0, probe.stderr
    where, missing = probe.stdout.splitlines()
    assert Path(where).is_relative_to(installed.venv) and missing == "None None"
    version = installed.run(installed.bin("python"), "-m", "flux7", "--version")
    assert version.returncode == 0 and version.stdout.strip().endswith("0.1.0"), version.stdout + version.stderr


def test_building_leaves_the_checkout_as_it_was_and_warns_of_nothing(installed: Installed) -> None:
    left = sorted(p.name for p in installed.src.iterdir() if p.name == "build" or p.name.endswith(".egg-info"))
    assert left == [], f"pip wheel left {left} in the checkout"
    assert "deprecated" not in installed.build_output.lower(), installed.build_output
    metadata = zipfile.ZipFile(installed.wheel).read("flux7-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def _assets(index_html: str) -> list[str]:
    return re.findall(r'(?:src|href)="\./([^"]+)"', index_html)


def test_flux7_serve_without_a_config_serves_health_the_console_and_memory(installed: Installed) -> None:
    port = free_port()
    log = installed.cwd / "serve.log"
    proc = subprocess.Popen(
        [installed.bin("flux7"), "serve", "--port", str(port)],
        cwd=installed.cwd,
        env=installed.env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or healthy(url), timeout=90, what="flux7 serve to answer /health")
        assert proc.poll() is None, log.read_text()
        with httpx.Client(base_url=url, trust_env=False, timeout=30) as http:
            assert http.get("/health").json()["status"] == "ok"
            index = http.get("/console/")
            assert index.status_code == 200 and "text/html" in index.headers["content-type"]
            assets = _assets(index.text)
            assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets), index.text
            for asset in assets:
                got = http.get(f"/console/{asset}")
                assert got.status_code == 200 and got.content, asset
            # memory: the migrations ran (the tables exist) and the vendored tokenizer loads
            rpc = {"jsonrpc": "2.0", "method": "tools/call"}
            store = {"name": "memory_store", "arguments": {"key": "deploy-window", "value": "Deploys on Tuesdays."}}
            stored = http.post("/rpc", json={**rpc, "id": 1, "params": store}).json()
            assert stored["result"]["content"][0]["text"] == "Memory 'deploy-window' created (1 total entries)"
            search = {"name": "memory_search", "arguments": {"query": "when do we deploy"}}
            found = http.post("/rpc", json={**rpc, "id": 2, "params": search}).json()
            assert "## deploy-window\nDeploys on Tuesdays." in found["result"]["content"][0]["text"], found
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    # the built-in defaults: the state in the per-user data directory, said at start, never in the working folder
    data = Path(installed.env["HOME"]) / ".local" / "share" / "flux7"
    assert (data / "flux7.db").is_file() and not (installed.cwd / "flux7.db").exists()
    assert f"config: the built-in defaults, state in {data}" in log.read_text()


async def test_mesh7_answers_mcp_over_stdio(installed: Installed) -> None:
    params = StdioServerParameters(command=installed.bin("mesh7"), args=["--mcp"], env=installed.env, cwd=installed.cwd)
    async with Client(params) as client:
        assert client.server_info is not None and client.server_info.name == "flux7-mesh"
        names = [t.name for t in (await client.list_tools()).tools]
        assert "grant.list" in names, names  # no upstreams configured: the mesh's own tools only
        grants = await client.call_tool("grant.list", {})  # reads the database the migrations created
        assert not grants.is_error, grants


def test_mem7_serve_answers_healthz(installed: Installed) -> None:
    port = free_port()
    log = installed.cwd / "mem7.log"
    proc = subprocess.Popen(
        [installed.bin("mem7"), "serve", "--listen", f"127.0.0.1:{port}"],
        cwd=installed.cwd,
        env={**installed.env, "MEM7_DIR": str(installed.cwd / "mem7")},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(lambda: proc.poll() is not None or answers(), timeout=90, what="mem7 serve to answer /healthz")
        assert proc.poll() is None, log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_sup7_and_mesh_commands_run(installed: Installed) -> None:
    sup7 = installed.run(installed.bin("sup7"), "--help")
    assert sup7.returncode == 0 and "Usage: sup7" in sup7.stdout, sup7.stdout + sup7.stderr
    mesh = installed.run(installed.bin("mesh"), "--help")
    assert mesh.returncode == 0 and "Usage: mesh" in mesh.stdout, mesh.stdout + mesh.stderr
