"""One port is one server: `flux7 serve` and `mem7 serve` refuse a port already bound, and an invalid port, with
exit 2 and a line naming the port, before anything is written (no admin token, no database, no workspace).

granian binds with SO_REUSEPORT, so without the check a second server started beside the first and the kernel
split connections between two servers with different configs and auth modes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.server import REPO, running_server

pytestmark = pytest.mark.served


def _config(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "config.yaml"
    cfg.write_text(f"storage_path: {folder}/data/flux7.db\nmemory: {{enabled: false}}\n{extra}")
    return cfg


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("FLUX7_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_flux7_serve_on_a_bound_port_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    with running_server(_config(tmp_path / "first", "auth: {open_loopback: true}\n")) as first:
        second = tmp_path / "second"
        cfg = _config(second)
        done = _run("serve", "--config", str(cfg), "--port", str(first.port), cwd=second)
        assert done.returncode == 2, done.stderr
        assert "address in use" in done.stderr and str(first.port) in done.stderr
        assert "Traceback" not in done.stderr
        assert sorted(p.name for p in second.iterdir()) == ["config.yaml"]  # no data folder, no token, no db
        # the first server alone answers every request: its open-loopback mode, never the second's defaults
        for _ in range(8):
            r = httpx.get(f"{first.url}/approvals", timeout=5, trust_env=False)
            assert r.status_code == 200


@pytest.mark.parametrize("port", ["70000", "-1", "0"])
def test_an_invalid_port_is_refused_before_anything_is_written(tmp_path: Path, port: str) -> None:
    cfg = _config(tmp_path)
    done = _run("serve", "--config", str(cfg), f"--port={port}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"invalid port {port}" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_mem7_serve_refuses_a_bound_port_before_its_workspace_exists(tmp_path: Path) -> None:
    with running_server(_config(tmp_path / "mesh")) as first:
        memory = tmp_path / "memory"
        memory.mkdir()
        env = {**os.environ, "PYTHONPATH": str(REPO), "MEM7_DIR": str(memory / "data")}
        done = subprocess.run(
            [sys.executable, "-m", "flux7.functions.entry", "memory", "serve", "--listen", f"127.0.0.1:{first.port}"],
            cwd=memory,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert "address in use" in done.stderr and str(first.port) in done.stderr
        assert list(memory.iterdir()) == []
