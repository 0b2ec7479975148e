"""Where a memory test's index lives: `<root>/index.db` (SQLite), or with `--engine=postgresql` a fresh database
per memory directory, so two directories still mean two indexes as two index.db files do."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.support import postgres
from tests.support.waiting import wait_until

__all__ = ["Stores"]


class Stores:
    def __init__(self, engine: str, request: pytest.FixtureRequest) -> None:
        self.engine = engine
        self._request = request
        self._urls: dict[Path, str] = {}
        self._admin = ""

    def target(self, root: Path) -> str | Path:
        """The `Database(...)` target of the memory directory `root`."""
        if self.engine != "postgresql":
            return root / "index.db"
        key = root.resolve()
        if key not in self._urls:
            if not self._admin:
                self._admin = str(self._request.getfixturevalue("postgres_admin_url"))
            self._urls[key] = postgres.create_database(self._admin)
        return self._urls[key]

    def env(self, root: Path) -> dict[str, str]:
        """The environment a `mem7` process on `root` needs to open the same index."""
        target = self.target(root)
        return {"MEM7_DATABASE_URL": target} if isinstance(target, str) else {}

    def snapshot(self, root: Path) -> str:
        """A copy of root's index as it is now (every service on it closed): the state a crash leaves to restore."""
        target = self.target(root)
        if isinstance(target, Path):
            copy = target.with_name(f"snapshot-{uuid.uuid4().hex[:8]}.db")
            shutil.copy(target, copy)
            return str(copy)
        name = "s_" + uuid.uuid4().hex[:16]
        # A closed pool's server processes may take a moment to go; a template must have no connection.
        wait_until(lambda: self._run(f"CREATE DATABASE {name} TEMPLATE {_name(target)}"), 30, "a database copy")
        return name

    def restore(self, root: Path, snapshot: str) -> None:
        """Put root's index back as `snapshot` holds it (every service on it closed)."""
        target = self.target(root)
        if isinstance(target, Path):
            for suffix in ("", "-wal", "-shm"):
                Path(f"{target}{suffix}").unlink(missing_ok=True)
            shutil.copy(snapshot, target)
            return
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {_name(target)} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {_name(target)} TEMPLATE {snapshot}")
            conn.execute(f"DROP DATABASE {snapshot}")

    def _run(self, sql: str) -> bool:
        try:
            with psycopg.connect(self._admin, autocommit=True) as conn:
                conn.execute(sql)
            return True
        except psycopg.errors.ObjectInUse:
            return False

    def close(self) -> None:
        for url in self._urls.values():
            postgres.drop_database(self._admin, url)


def _name(url: str) -> str:
    return url.rsplit("/", 1)[1]
