"""Every version of a policy file, a catalog file or an upstream tool definition the server has seen.

Recorded on each control-plane write and hot reload (policies, catalog) and each time pinning looks at a tool
(shared/gate/pins.py), so the diff engine can compare any two. An unchanged content is never written twice."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flux7.shared.gate.policy_files import Materialized, plain_yaml, write_back
from flux7.shared.store.db import Database

__all__ = ["KINDS", "Versions", "materialize_catalog"]

KINDS = ("policy", "catalog", "tool")


class Versions:
    def __init__(self, db: Database) -> None:
        self._db = db
        self.observed: set[str] = set()  # tool fingerprints already recorded by this process

    def record(self, kind: str, name: str, content: str, by: str = "") -> int:
        """Record `content` as the newest version unless it already is; the version number in force."""
        return self.record_many(kind, {name: content}, by).get(name, 0)

    def record_many(self, kind: str, contents: Mapping[str, str], by: str = "") -> dict[str, int]:
        digests = {n: hashlib.sha256(c.encode()).hexdigest() for n, c in contents.items()}
        out: dict[str, int] = {}
        now = time.time()
        with self._db.write() as conn:
            for name, content in contents.items():
                row = conn.execute(
                    "SELECT version, sha256 FROM governance_versions WHERE kind = ? AND name = ? "
                    "ORDER BY version DESC LIMIT 1",
                    (kind, name),
                ).fetchone()
                if row is not None and row[1] == digests[name]:
                    out[name] = int(row[0])
                    continue
                if row is None and content == "":
                    continue  # a removal of something never seen
                version = int(row[0]) + 1 if row is not None else 1
                conn.execute(
                    "INSERT INTO governance_versions (kind, name, version, content, sha256, at, by) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (kind, name, version, content, digests[name], now, by),
                )
                out[name] = version
        return out

    def sync(self, kind: str, contents: Mapping[str, str], by: str = "") -> dict[str, int]:
        """Record a whole set (a directory's files): the given contents, and a removal for each known name that
        is no longer in it."""
        known = {
            str(r[0]) for r in self._db.query("SELECT DISTINCT name FROM governance_versions WHERE kind = ?", (kind,))
        }
        full = dict(contents)
        for gone in known - full.keys():
            if self.latest(kind, gone) not in (None, ""):
                full[gone] = ""
        return self.record_many(kind, full, by)

    def latest(self, kind: str, name: str) -> str | None:
        row = self._db.query_one(
            "SELECT content FROM governance_versions WHERE kind = ? AND name = ? ORDER BY version DESC LIMIT 1",
            (kind, name),
        )
        return str(row[0]) if row is not None else None

    def in_force(self, kind: str) -> dict[str, str]:
        """The newest content of every name of `kind` that is not a removal: for files, the set last loaded."""
        rows = self._db.query(
            "SELECT name, content FROM governance_versions AS v WHERE kind = ? AND version = "
            "(SELECT max(version) FROM governance_versions WHERE kind = v.kind AND name = v.name) ORDER BY name",
            (kind,),
        )
        return {str(r[0]): str(r[1]) for r in rows if str(r[1]) != ""}

    def get(self, kind: str, name: str, version: int) -> dict[str, Any] | None:
        row = self._db.query_one(
            "SELECT version, content, sha256, at, by FROM governance_versions WHERE kind = ? AND name = ? "
            "AND version = ?",
            (kind, name, version),
        )
        return _view(kind, name, row) if row is not None else None

    def history(self, kind: str, name: str) -> list[dict[str, Any]]:
        rows = self._db.query(
            "SELECT version, content, sha256, at, by FROM governance_versions WHERE kind = ? AND name = ? "
            "ORDER BY version",
            (kind, name),
        )
        return [_view(kind, name, r, content=False) for r in rows]

    def names(self, kind: str) -> list[dict[str, Any]]:
        rows = self._db.query(
            "SELECT name, max(version) AS v, max(at) AS at FROM governance_versions WHERE kind = ? "
            "GROUP BY name ORDER BY name",
            (kind,),
        )
        return [{"kind": kind, "name": str(r["name"]), "versions": int(r["v"]), "at": float(r["at"])} for r in rows]


def _view(kind: str, name: str, row: Any, *, content: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "version": int(row["version"]),
        "sha256": str(row["sha256"]),
        "at": float(row["at"]),
        "by": str(row["by"]),
        "removed": str(row["content"]) == "",
    }
    if content:
        out["content"] = str(row["content"])
    return out


def materialize_catalog(db: Database, directory: Path) -> Materialized:
    """`flux7 restore`: make `catalog_dir` hold the catalog files last loaded, as their newest versions record
    them (the catalog's counterpart of shared/gate/policy_files.py `materialize`, with the same `.bak` rules). Nothing
    happens when no catalog version is recorded (a database from before migration 0018, or no catalog_dir)."""
    if db.query_one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'governance_versions'") is None:
        return Materialized()
    if db.query_one("SELECT 1 FROM governance_versions WHERE kind = 'catalog' LIMIT 1") is None:
        return Materialized()
    recorded = {n: c.encode() for n, c in Versions(db).in_force("catalog").items() if plain_yaml(n)}
    return write_back(directory, recorded)
