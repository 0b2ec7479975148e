"""deploy/entrypoint.sh on PostgreSQL: whichever way the database is named (FLUX7_DATABASE_URL, DATABASE_URL as
`fly postgres attach` sets it, both (FLUX7_DATABASE_URL wins), or `database:` in the config on the volume), the
server runs without Litestream, restores nothing and writes nothing to a replica, and its state is in PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.support.http import free_port, wait_until

from .support import REPO
from .test_entrypoint import ADMIN, ENTRYPOINT, _env

pytestmark = pytest.mark.served


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("named_by", ["FLUX7_DATABASE_URL", "DATABASE_URL", "both", "config"])
def test_on_postgresql_the_entrypoint_runs_the_server_without_litestream(
    tmp_path: Path, postgres_url: str, named_by: str
) -> None:
    volume, replica = tmp_path / "vol", tmp_path / "replica"
    port = free_port()
    env = _env(volume, replica, port)  # a replica URL is set: on PostgreSQL it must not be used
    for name in ("FLUX7_DATABASE_URL", "DATABASE_URL", "FLUX7_TEST_CONFIG_DATABASE"):
        env.pop(name, None)
    if named_by == "config":
        volume.mkdir()
        # as docs/deploy.md says: name the database and drop trace_file (the server refuses the pair)
        production = "\n".join(
            line
            for line in (REPO / "deploy" / "config.production.yaml").read_text().splitlines()
            if not line.startswith("trace_file:")
        )
        (volume / "config.yaml").write_text(production + f'\ndatabase: "{postgres_url}"\n')
    elif named_by == "both":  # FLUX7_DATABASE_URL wins over an attached DATABASE_URL
        env["FLUX7_DATABASE_URL"] = postgres_url
        env["DATABASE_URL"] = f"postgresql://nobody@127.0.0.1:{free_port()}/elsewhere?connect_timeout=1"
    else:
        env[named_by] = postgres_url
    log = tmp_path / "entrypoint.log"
    proc = subprocess.Popen(
        [str(ENTRYPOINT)], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or _up(url), timeout=90, what="the server behind the entrypoint")
        assert proc.poll() is None, log.read_text()
        text = log.read_text()
        assert "the database is PostgreSQL: no Litestream here" in text
        assert "restore" not in text and "NOT replicated" not in text
        # the entrypoint exec'd the server itself: no litestream parent process
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and not any(b"litestream" in part for part in cmdline)
        grant = httpx.post(
            f"{url}/grants", json={"agent": "ops", "tools": "*", "duration": "1h"}, headers=ADMIN, trust_env=False
        )
        assert grant.status_code == 201, grant.text
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT agent FROM grants WHERE id = %s", (grant.json()["id"],)).fetchall()
    assert rows == [("ops",)]
    # nothing of SQLite or Litestream on the volume, nothing shipped to the replica
    assert not (volume / "flux7.db").exists() and not (volume / ".flux7.db-litestream").exists()
    assert not replica.exists()
    assert (volume / "policies").is_dir()
    if named_by != "config":  # first boot on PostgreSQL seeds the PostgreSQL variant of the production config
        assert (volume / "config.yaml").read_bytes() == (REPO / "deploy" / "config.postgres.yaml").read_bytes()
