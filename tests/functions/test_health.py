"""GET /health: "ok" while the mesh works; "degraded", with what is wrong, while another program holds the
database's write lock (the published SDKs read only `status`: is_healthy() turns false, nothing breaks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings

HOLD_THE_WRITE_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""


@pytest.mark.served
def test_health_is_degraded_while_another_program_holds_the_write_lock(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"storage_path: {tmp_path}/flux7.db\nauth: {{open_loopback: true}}\nmemory: {{enabled: false}}\n")
    mesh = Mesh(load_settings(config, env={}))
    with TestClient(create_app(mesh)) as client:
        healthy = client.get("/health")
        assert healthy.status_code == 200 and healthy.json()["status"] == "ok" and "problems" not in healthy.json()
        with subprocess.Popen(  # another program with an open write transaction, until its stdin closes
            [sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(tmp_path / "flux7.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as other:
            assert other.stdout is not None and other.stdin is not None
            assert other.stdout.readline() == "locked\n"
            locked = client.get("/health")
            other.stdin.close()
            assert other.wait(30) == 0
        body: dict[str, Any] = locked.json()
        assert locked.status_code == 200  # load balancers and the Fly check read the status code: still up
        assert body["status"] == "degraded" and body["version"] and "traces" in body
        (problem,) = body["problems"]
        assert "locked for writing by another program" in problem and str(tmp_path / "flux7.db") in problem
        assert client.get("/health").json()["status"] == "ok"  # the lock released: healthy again
