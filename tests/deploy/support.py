"""The deployment as it runs: `flux7 serve` under `litestream replicate -exec` with the repo's litestream.yml and a
`file` replica, and helpers to compare two SQLite files table by table."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux7.shared.cli.backup import Litestream, ReplicaSource, find_litestream
from tests.functions.conftest import POLICY
from tests.support.http import free_port, wait_until
from tests.support.server import REPO, Server, healthy
from tests.upstreams.servers.http_backend import Backend

LITESTREAM_YML = REPO / "litestream.yml"
FLUX7 = f"{sys.executable} -m flux7.functions.entry"


def write_config(
    root: Path, data: str, backend: Backend, extra: str = "", *, hybrid: bool = False, policies: str = "policies"
) -> Path:
    """A config beside `root/<data>/` (its database is `<data>/flux7.db`, as litestream.yml expects), with the
    example policy in `root/<policies>/` (written when that directory has none)."""
    (root / "spec.json").write_text(json.dumps(backend.spec()))
    (root / policies).mkdir(exist_ok=True)
    if not (root / policies / "agents.yaml").exists():
        (root / policies / "agents.yaml").write_text(POLICY)
    if "auth:" not in extra:  # no generated admin token file among the data files these tests compare
        extra = "auth: {open_loopback: true}\n" + extra
    cfg = root / f"{data}.yaml"
    cfg.write_text(
        f"""
storage_path: {data}/flux7.db
trace_file: {data}/traces.jsonl
policy_dir: {policies}
approval: {{timeout_seconds: 120, channel: queue}}
memory: {{enabled: true, hybrid: {str(hybrid).lower()}}}
openapi:
  - file: spec.json
    backend_url: {backend.url}
{extra}
"""
    )
    return cfg


def env_for(data: Path, replica: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FLUX7_DATA": str(data),
        "LITESTREAM_REPLICA_URL": replica.as_uri(),
    }


def source_for(data: Path, replica: Path) -> ReplicaSource:
    return ReplicaSource.from_config(LITESTREAM_YML, data / "flux7.db", env_for(data, replica))


@dataclass
class Replicated(Server):
    """`litestream replicate -exec "<flux7 serve ...>"`: one process group, Litestream the parent (so `kill9`
    stops Litestream, granian and its workers at once: no shutdown hook, no final sync)."""

    data: Path
    replica: Path

    @property
    def litestream(self) -> Litestream:
        return Litestream(find_litestream(), timeout=30, env=env_for(self.data, self.replica))

    def caught_up(self, timeout: float = 30.0) -> int:
        """Push everything committed now, then wait until the replica itself (its LTX files) holds it."""
        source = source_for(self.data, self.replica)
        local, _ = self.litestream.sync(source.db, source.socket)
        wait_until(lambda: self.litestream.position(source) >= local, timeout=timeout)
        return local


def start_replicated(config: Path, data: Path, replica: Path, *, workers: int = 1) -> Replicated:
    port = free_port()
    data.mkdir(parents=True, exist_ok=True)  # as the entrypoint does: the control socket lives there
    log = config.parent / f"replicate-{port}.log"
    serve = f"{FLUX7} serve --config {config} --port {port} --workers {workers}"
    proc = subprocess.Popen(
        [find_litestream(), "replicate", "-config", str(LITESTREAM_YML), "-exec", serve],
        cwd=config.parent,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env_for(data, replica),
        start_new_session=True,
    )
    running = Replicated(proc, port, log, data, replica)
    try:
        wait_until(lambda: proc.poll() is not None or healthy(running.url), timeout=60)
    except AssertionError:  # not up in time
        running.kill9()
        raise
    if proc.poll() is not None:
        raise AssertionError(f"litestream replicate exited {proc.returncode}:\n{log.read_text()}")
    return running


@contextmanager
def replicated(config: Path, data: Path, replica: Path) -> Iterator[Replicated]:
    running = start_replicated(config, data, replica)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.kill9()


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flux7.functions.entry", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or {**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


def tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (FTS5 shadow tables included), read-only, in a stable order."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        names = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            if not conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (r[0],))
            .fetchone()[0]
            .upper()
            .startswith("CREATE VIRTUAL TABLE")
        ]
        return {n: sorted(conn.execute(f'SELECT * FROM "{n}"').fetchall(), key=repr) for n in names}
    finally:
        conn.close()


def schema(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    finally:
        conn.close()


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
