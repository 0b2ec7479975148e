"""The policy files' copy in the database, so a replica restores the policies that were in force.

Policies are YAML files in `policy_dir`, edited by hand or through the console. The database is what Litestream
replicates; the files are not. So every time a policy set loads without error (at start and on each hot
reload), `snapshot` records the directory's `*.yaml` files in the `policy_files` table, and `flux7 restore`
calls `materialize` to write them back: files that differ are rewritten (the old one kept as `<name>.yaml.bak`),
files the database does not know are moved aside as `<name>.yaml.bak` (the loader reads `*.yaml` only), and
nothing happens when the table is empty (a database from before this table, or a deployment without policy_dir).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .db import Database

__all__ = ["Materialized", "materialize", "plain_yaml", "snapshot", "write_back"]

log = logging.getLogger("flux7.policy")


def _files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.yaml")) if p.is_file()}


def snapshot(db: Database, directory: Path) -> bool:
    """Record the directory's policy files; True when the table changed. Unchanged files cost no write."""
    files = _files(directory)
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    known = {str(r[0]): str(r[1]) for r in db.query("SELECT name, sha256 FROM policy_files")}
    if known == digests:
        return False
    now = int(time.time())
    with db.write() as conn:
        for name in known.keys() - digests.keys():
            conn.execute("DELETE FROM policy_files WHERE name = ?", (name,))
        for name, digest in digests.items():
            if known.get(name) != digest:
                conn.execute(
                    "INSERT INTO policy_files (name, content, sha256, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET content = excluded.content, sha256 = excluded.sha256, "
                    "updated_at = excluded.updated_at",
                    (name, files[name], digest, now),
                )
    log.info("policy files recorded in the database: %d files", len(files))
    return True


@dataclass
class Materialized:
    written: list[str] = field(default_factory=list)
    set_aside: list[str] = field(default_factory=list)


def materialize(db: Database, directory: Path) -> Materialized:
    """Make the directory hold the recorded policy files (see the module's docstring)."""
    outcome = Materialized()
    if not db.has_table("policy_files"):
        return outcome  # a replica of a database from before the table: nothing recorded, nothing to write
    rows = db.query("SELECT name, content FROM policy_files ORDER BY name")
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
