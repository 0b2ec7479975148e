"""A directory's YAML files and their copy in the database: the policy files (`policy_files`) and the catalog
files (`catalog_files`), so a replica restores what was in force and several instances share one set.

Policies are YAML files in `policy_dir`, edited by hand or through the console. The database is what Litestream
replicates; the files are not. So every time a policy set loads without error (at start and on each hot
reload), `snapshot` records the directory's `*.yaml` files in the `policy_files` table, and `flux7 restore`
calls `materialize` to write them back: files that differ are rewritten (the old one kept as `<name>.yaml.bak`),
files the database does not know are moved aside as `<name>.yaml.bak` (the loader reads `*.yaml` only), and
nothing happens when the table is empty (a database from before this table, or a deployment without policy_dir).

`DirectoryCopy` is what a hot-reloading loader (shared/gate/policy_store.py, shared/governance/catalog.py) holds: it
records the set in force, and on PostgreSQL, where instances on their own disks share one database, it makes the
database's copy the deployment's truth by writing into the directory what another instance recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from flux7.shared.store.db import Database

__all__ = ["TABLES", "DirectoryCopy", "Materialized", "materialize", "plain_yaml", "snapshot", "write_back"]

log = logging.getLogger("flux7.policy")

TABLES = ("policy_files", "catalog_files")  # the tables of this shape; a table name is never taken from input


def _table(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"not a table of files: {table!r}")
    return table


def _files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.yaml")) if p.is_file()}


def _digests(directory: Path) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in _files(directory).items()}


def _state(digests: dict[str, str]) -> str:
    """One string for a set of files ("" for none), the same whichever side (directory or table) it comes from."""
    if not digests:
        return ""
    return hashlib.sha256(";".join(f"{n}:{d}" for n, d in sorted(digests.items())).encode()).hexdigest()


def snapshot(db: Database, directory: Path, table: str = "policy_files", base: dict[str, str] | None = None) -> bool:
    """Record the directory's files in `table`; True when the table changed. Unchanged files cost no write.
    With `base` (the digests the table held when this directory last matched it), only what changed since is
    written: a file another instance recorded meanwhile stays."""
    table = _table(table)
    files = _files(directory)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    known = base
    if known is None:
        known = {str(r[0]): str(r[1]) for r in db.query(f"SELECT name, sha256 FROM {table}")}
    if known == digests:
        return False
    now = int(time.time())
    with db.write() as conn:
        for name in known.keys() - digests.keys():
            conn.execute(f"DELETE FROM {table} WHERE name = ?", (name,))
        for name, digest in digests.items():
            if known.get(name) != digest:
                conn.execute(
                    f"INSERT INTO {table} (name, content, sha256, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET content = excluded.content, sha256 = excluded.sha256, "
                    "updated_at = excluded.updated_at",
                    (name, files[name], digest, now),
                )
    log.info("%s recorded in the database: %d files", table, len(files))
    return True


@dataclass
class Materialized:
    written: list[str] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)


def materialize(db: Database, directory: Path, table: str = "policy_files") -> Materialized:
    """Make the directory hold the files recorded in `table` (see the module's docstring)."""
    outcome = Materialized()
    if not db.has_table(_table(table)):
        return outcome  # a replica of a database from before the table: nothing recorded, nothing to write
    rows = db.query(f"SELECT name, content FROM {table} ORDER BY name")
    if not rows:
        return outcome
    recorded = {str(name): bytes(content) for name, content in rows if plain_yaml(str(name))}
    if not recorded:
        return outcome
    return write_back(directory, recorded)


def plain_yaml(name: str) -> bool:
    """Only plain `*.yaml` names: a row naming anything else (a path) is not written anywhere."""
    return Path(name).name == name and name.endswith(".yaml") and not name.startswith(".")


def write_back(directory: Path, recorded: dict[str, bytes]) -> Materialized:
    """Make `directory`'s `*.yaml` files exactly `recorded`: a file that differs is rewritten (the old one kept as
    `<name>.yaml.bak`), a file not recorded is moved aside as `<name>.yaml.bak`. Also the catalog's restore."""
    outcome = Materialized()
    directory.mkdir(parents=True, exist_ok=True)
    for path in sorted(directory.glob("*.yaml")):
        if path.is_file() and path.name not in recorded:
            os.replace(path, directory / f"{path.name}.bak")
            outcome.set_aside.append(path.name)
    for name, data in recorded.items():
        path = directory / name
        if path.is_file() and path.read_bytes() == data:
            continue
        if path.is_file():
            os.replace(path, directory / f"{name}.bak")  # the version it replaces stays beside it
        temp = directory / f".{name}.restoring"
        temp.write_bytes(data)
        os.replace(temp, path)  # whole file or none: a running server's reload never reads half of one
        outcome.written.append(name)
    return outcome


class DirectoryCopy:
    """`directory`'s files and their copy in `table`, for the loader that hot-reloads them. `record` after each
    set that loads; where `shared` (PostgreSQL), `poll` before each look at the files: whatever another instance
    recorded since this one last looked is written here (the replaced file kept as `.bak`), and the loader's own
    fingerprint check then reloads it; `record` then writes only the files this instance changed, so two edits
    of different files on two instances both stay (of two edits of one file, the later recorded). A control-plane
    edit runs inside `editing`. `what` names the files in the log."""

    def __init__(self, db: Database | None, directory: Path | None, table: str, what: str) -> None:
        self._db = db
        self.directory = directory
        self._table = _table(table)
        self._what = what
        self._seen = ""  # the table's state as this process last wrote or read it
        self._base: dict[str, str] = {}  # shared: the table's digests then, which this directory matched
        self._lock = threading.RLock()  # a pull never writes into the directory in the middle of an edit

    @property
    def shared(self) -> bool:
        return self._db is not None and self._db.engine == "postgresql" and self.directory is not None

    def _state(self) -> str:
        assert self._db is not None
        return _state({str(n): str(d) for n, d in self._db.query(f"SELECT name, sha256 FROM {self._table}")})

    def pull(self) -> bool:
        """Write here the files another instance recorded since this one last looked (a control-plane edit, a
        file changed on its disk); True when a file changed. An empty table writes nothing unless this process saw
        files recorded before (then they were all removed)."""
        assert self._db is not None and self.directory is not None
        with self._lock:
            state = self._state()
            if state == self._seen:
                return False
            if state or not self._seen:
                outcome = materialize(self._db, self.directory, self._table)  # nothing when nothing is recorded
            else:
                outcome = write_back(self.directory, {})  # the last file removed on another instance
            self._seen = state  # after the write: a failed one is tried again on the next look
            self._base = _digests(self.directory) if state else {}
        if outcome.written or outcome.set_aside:
            log.info("%s files from the database: %s", self._what, ", ".join(outcome.written + outcome.set_aside))
        return bool(outcome.written or outcome.set_aside)

    def poll(self) -> bool:
        """`pull` where shared; the database unreachable is logged and the loader goes on with the set in force."""
        if not self.shared or not self._lock.acquire(blocking=False):
            return False  # an edit under way here has just pulled: the hot path does not wait for it
        try:
            return self.pull()
        except Exception:
            log.exception("%s files not read from the database", self._what)
            return False
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def editing(self, reload: Callable[[], object]) -> Iterator[None]:
        """Around a control-plane edit of the directory: the deployment's newest files are taken first (`reload`
        when any changed), so the edit is checked against them, and no pull writes here until it is recorded."""
        with self._lock:
            if self.poll():
                reload()
            yield

    def record(self) -> None:
        """Copy the directory's files (the set now in force) into the table. A failure is logged: it never
        changes what is in force."""
        if self._db is None or self.directory is None:
            return
        try:
            with self._lock:
                if not self.shared:
                    snapshot(self._db, self.directory, self._table)
                    return
                mine = _digests(self.directory)
                snapshot(self._db, self.directory, self._table, base=self._base)
                # this instance's own files, nothing to pull back; a later record by another instance differs
                self._seen, self._base = _state(mine), mine
        except Exception:
            log.exception("%s files not recorded in the database", self._what)
