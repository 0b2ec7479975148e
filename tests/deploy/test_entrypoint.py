"""deploy/entrypoint.sh as the container runs it: the first boot seeds the volume and starts empty; a new machine
with an empty volume restores from the replica before serving; without a replica the server runs alone."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from flux7.shared.cli.backup import Litestream, ReplicaSource, find_litestream
from tests.support.http import free_port, wait_until

from .support import FLUX7, LITESTREAM_YML, REPO

pytestmark = pytest.mark.served

ENTRYPOINT = REPO / "deploy" / "entrypoint.sh"
ADMIN = {"Authorization": "Bearer adm1n"}
MEMORY = {"Authorization": "Bearer m3m"}


def _env(volume: Path, replica: Path | None, port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FLUX7_DATA": str(volume),
        "FLUX7_APP": str(REPO),
        "FLUX7_HOST": "127.0.0.1",
        "FLUX7_PORT": str(port),
        "FLUX7_BIN": FLUX7,
        "FLUX7_LITESTREAM": find_litestream(),
        "LITESTREAM_CONFIG": str(LITESTREAM_YML),
        "MESH_ADMIN_TOKEN": "adm1n",
        "MEM7_TOKEN": "m3m",
    }
    env.pop("BUCKET_NAME", None)
    env["LITESTREAM_REPLICA_URL"] = replica.as_uri() if replica else ""
    return env


@contextmanager
def booted(volume: Path, replica: Path | None) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    port = free_port()
    log = volume.parent / f"{volume.name}-{port}.log"
    proc = subprocess.Popen(
        [str(ENTRYPOINT)],
        env=_env(volume, replica, port),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(lambda: proc.poll() is not None or up(), timeout=60)
        assert proc.poll() is None, log.read_text()
        yield url, proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _rpc(url: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    answer = httpx.post(f"{url}/rpc", json=body, headers=MEMORY, timeout=30, trust_env=False).json()
    assert "error" not in answer, answer
    return dict(answer["result"])


def test_a_new_machine_with_an_empty_volume_restores_from_the_replica_before_serving(tmp_path: Path) -> None:
    replica = tmp_path / "replica"
    first, second = tmp_path / "vol1", tmp_path / "vol2"
    with booted(first, replica) as (url, proc, log):
        assert (first / "config.yaml").read_bytes() == (REPO / "deploy" / "config.production.yaml").read_bytes()
        assert (first / "policies").is_dir()
        assert "nothing restored: the replica is empty" in log.read_text()
        grant = httpx.post(
            f"{url}/grants", json={"agent": "ops", "tools": "*", "duration": "2h"}, headers=ADMIN, trust_env=False
        )
        assert grant.status_code == 201
        assert httpx.get(f"{url}/grants", trust_env=False).status_code == 401  # the admin token is required
        assert not _rpc(url, "memory_store", {"key": "runbook", "value": "restart with care"}).get("isError")
        # SIGTERM as Fly sends it at a stop: Litestream stops the server, ships the last commits, exits.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()

    env = _env(second, replica, 0)
    source = ReplicaSource.from_config(LITESTREAM_YML, second / "flux7.db", env)
    assert Litestream(find_litestream(), env=env).position(source) > 0

    with booted(second, replica) as (url, _proc, log):
        assert "restored" in log.read_text()
        grants = httpx.get(f"{url}/grants", headers=ADMIN, trust_env=False).json()
        assert [g["id"] for g in grants] == [grant.json()["id"]]
        got = _rpc(url, "memory_recall", {"key": "runbook"})
        assert "restart with care" in got["content"][0]["text"]
        chain = httpx.get(f"{url}/memory/chain", headers=MEMORY, trust_env=False).json()
        assert chain["holds"] is True and chain["report"]["entries"] == 1
        assert sorted(p.name for p in (second / "memory" / "workspace" / "memory").iterdir()) == sorted(
            p.name for p in (first / "memory" / "workspace" / "memory").iterdir()
        )

    # The same machine restarting keeps its own database: nothing is restored over it.
    with booted(second, replica) as (url, _proc, log):
        assert "restore" not in log.read_text()
        assert [g["id"] for g in httpx.get(f"{url}/grants", headers=ADMIN, trust_env=False).json()] == [
            grant.json()["id"]
        ]


def test_without_a_replica_the_server_runs_alone_and_says_it_is_not_replicated(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    with booted(volume, None) as (url, _proc, log):
        assert httpx.get(f"{url}/health", trust_env=False).json()["status"] == "ok"
        assert "the database is NOT replicated" in log.read_text()
        assert not (volume / ".flux7.db-litestream").exists()
