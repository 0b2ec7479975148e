"""The agent catalog: agents declared in YAML files in `catalog_dir` (beside `policy_dir`), hot-reloaded and
editable through the control plane like policies, and each entry's lifecycle (proposed -> active -> suspended
-> retired) kept in the database with who, when and why.

A file holds one entry (a mapping with `id`) or several (`agents: [...]`). An entry's `id` is an agent id or a
glob; an agent is described by the first exact entry naming it, else the first glob matching it (file order).
A suspended or retired agent is refused by the pipeline before any policy (`floor`, rule `lifecycle:<state>`).
The files in force are copied into the database (`catalog_files`) as the policy files are: on PostgreSQL that copy
is the deployment's catalog, and every instance writes a change recorded by another into its own catalog_dir."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import msgspec

from flux7.shared.errors import BadRequest, ConfigError, Conflict, NotFound, NotImplementedFeature
from flux7.shared.gate.policy import Decision
from flux7.shared.gate.policy_files import DirectoryCopy
from flux7.shared.globs import glob_match, is_exact
from flux7.shared.governance.versions import Versions
from flux7.shared.safe_yaml import load_yaml
from flux7.shared.settings import Settings
from flux7.shared.store.db import Database

__all__ = ["AUTONOMY", "STATES", "AgentEntry", "Catalog", "parse_catalog"]

log = logging.getLogger("flux7.governance")

STATES = ("proposed", "active", "suspended", "retired")
REFUSED = ("suspended", "retired")
TRANSITIONS = {
    "proposed": ("active", "retired"),
    "active": ("suspended", "retired"),
    "suspended": ("active", "retired"),
    "retired": (),
}
AUTONOMY = ("", "human_in_the_loop", "supervised", "autonomous")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class AgentEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    id: str
    name: str = ""
    owner: str = ""
    team: str = ""
    purpose: str = ""
    environment: str = ""
    model: str = ""
    tools: tuple[str, ...] = ()  # declared tool globs
    upstreams: tuple[str, ...] = ()  # declared upstreams (MCP servers, OpenAPI/CLI sources)
    sub_agents: tuple[str, ...] = ()  # agents this one calls
    data_classes: tuple[str, ...] = ()
    autonomy: str = ""
    lifecycle: str = "proposed"  # the state until a transition is recorded
    source_file: str = ""

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


def parse_catalog(text: str | bytes, source: str) -> list[AgentEntry]:
    """One catalog file's entries, validated as the loader reads them; ConfigError names the file and key."""
    raw = load_yaml(text, source) or {}
    if not isinstance(raw, dict):
        raise ConfigError(source, "(top level)", "a catalog file holds a mapping: one entry, or `agents: [...]`")
    items = raw.get("agents") if "agents" in raw else [raw]
    if not isinstance(items, list):
        raise ConfigError(source, "agents", "a list of entries")
    if "agents" in raw and len(raw) != 1:
        raise ConfigError(source, "(top level)", "a file with `agents:` holds nothing else")
    out: list[AgentEntry] = []
    for i, item in enumerate(items):
        key = f"agents[{i}]" if "agents" in raw else "(entry)"
        if not isinstance(item, dict) or not item.get("id"):
            raise ConfigError(source, f"{key}.id", "an entry needs an id (an agent id or a glob)")
        item = {**item, "source_file": source}
        try:
            entry = msgspec.convert(item, AgentEntry, strict=False)
        except msgspec.ValidationError as e:
            raise ConfigError(source, key, str(e)) from None
        if entry.lifecycle not in STATES:
            raise ConfigError(source, f"{key}.lifecycle", f"one of {', '.join(STATES)}")
        if entry.autonomy not in AUTONOMY:
            raise ConfigError(source, f"{key}.autonomy", f"one of {', '.join(a for a in AUTONOMY if a)}")
        out.append(entry)
    return out


def _load_dir(directory: Path) -> tuple[list[AgentEntry], dict[str, str]]:
    entries: list[AgentEntry] = []
    texts: dict[str, str] = {}
    for file in sorted(directory.glob("*.yaml")):
        try:
            data = file.read_bytes()
        except OSError as e:
            raise ConfigError(str(file), "(file)", e.strerror or str(e)) from None
        entries.extend(parse_catalog(data, str(file)))
        texts[file.name] = data.decode("utf-8", errors="replace")
    ids = [e.id for e in entries]
    if len(ids) != len(set(ids)):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(str(directory), "id", f"duplicate catalog entry {dup!r}")
    return entries, texts


class Catalog:
    """The catalog in force (re-read at most once a second when its files change; a broken edit keeps the
    last good one) and the lifecycle state of its entries."""

    CHECK_INTERVAL = 1.0

    def __init__(self, settings: Settings, db: Database, versions: Versions) -> None:
        self._db = db
        self._versions = versions
        self.directory = settings.resolve_path(settings.catalog_dir) if settings.catalog_dir else None
        self._lock = threading.Lock()
        self._fingerprint = ""
        self._entries: tuple[AgentEntry, ...] = ()
        self._match_cache: dict[str, AgentEntry | None] = {}
        self._next_check = 0.0
        self.last_error = ""
        self._copy = DirectoryCopy(db, self.directory, "catalog_files", "catalog")
        if self.directory is not None:
            if not self.directory.is_dir():
                raise ConfigError(
                    settings.config_path or "(config)", "catalog_dir", f"not a directory: {self.directory}"
                )
            if self._copy.shared:
                self._copy.pull()  # an instance starting with older files takes the deployment's
            self.reload_if_changed(force=True)
            if self.last_error:
                raise ConfigError(str(self.directory), "catalog", self.last_error)

    # -- loading -------------------------------------------------------------------------------------------

    def _files_fingerprint(self) -> str:
        h = hashlib.sha256()
        if self.directory is not None and self.directory.is_dir():
            for f in sorted(self.directory.glob("*.yaml")):
                try:
                    st = f.stat()
                except OSError:
                    continue
                h.update(f"{f}:{st.st_mtime_ns}:{st.st_size};".encode())
        return h.hexdigest()[:16]

    def reload_if_changed(self, *, force: bool = False, by: str = "") -> bool:
        if self.directory is None:
            return False
        with self._lock:
            fp = self._files_fingerprint()
            if fp == self._fingerprint and not force:
                return False
            self._fingerprint = fp
            try:
                entries, texts = _load_dir(self.directory)
            except ConfigError as e:
                self.last_error = str(e)
                log.error("catalog reload failed, keeping the last good catalog: %s", e)
                return False
            self.last_error = ""
            self._entries = tuple(entries)
            self._match_cache = {}
        try:
            self._versions.sync("catalog", texts, by=by or "reload")
        except Exception:  # a version not recorded never changes the catalog in force
            log.exception("catalog versions not recorded")
        # after the version: another instance taking these files finds it recorded under who made the edit
        self._copy.record()
        return True

    def _look(self) -> None:
        """At most once a second: the files changed on disk, or (PostgreSQL) by another instance, reloaded."""
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self.CHECK_INTERVAL
            self._copy.poll()  # another instance's edit written here first, then reloaded below
            self.reload_if_changed()

    @property
    def entries(self) -> tuple[AgentEntry, ...]:
        self._look()
        return self._entries

    def match(self, agent: str) -> AgentEntry | None:
        entries = self.entries
        if agent in self._match_cache:
            return self._match_cache[agent]
        found = next((e for e in entries if is_exact(e.id) and e.id == agent), None)
        if found is None:
            found = next((e for e in entries if not is_exact(e.id) and glob_match(e.id, agent)), None)
        if len(self._match_cache) < 10000:
            self._match_cache[agent] = found
        return found

    def entry(self, entry_id: str) -> AgentEntry:
        found = next((e for e in self.entries if e.id == entry_id), None)
        if found is None:
            raise NotFound(f"no catalog entry {entry_id!r}")
        return found

    # -- lifecycle -----------------------------------------------------------------------------------------

    def state_of(self, entry: AgentEntry) -> str:
        row = self._db.query_one("SELECT state FROM agent_lifecycle WHERE entry_id = ?", (entry.id,))
        return str(row[0]) if row is not None else entry.lifecycle

    def floor(self, agent: str) -> Decision | None:
        """The pipeline's lifecycle floor: a suspended or retired agent is refused before any policy."""
        if self.directory is None:
            return None
        entry = self.match(agent)
        if entry is None:
            return None
        state = self.state_of(entry)
        if state not in REFUSED:
            return None
        row = self._db.query_one("SELECT reason FROM agent_lifecycle WHERE entry_id = ?", (entry.id,))
        why = f": {row[0]}" if row is not None and row[0] else ""
        return Decision("deny", f"lifecycle:{state}", f"agent {agent} is {state} in the catalog ({entry.id}){why}")

    def transition(self, entry_id: str, to_state: str, *, by: str, reason: str) -> dict[str, Any]:
        if to_state not in STATES:
            raise BadRequest(f"state must be one of {', '.join(STATES)}")
        if not by:
            raise BadRequest("who makes the transition (`by`) is required")
        if not reason.strip():
            raise BadRequest("why (`reason`) is required")
        entry = self.entry(entry_id)
        now = time.time()
        with self._db.write() as conn:
            row = conn.execute("SELECT state FROM agent_lifecycle WHERE entry_id = ?", (entry.id,)).fetchone()
            current = str(row[0]) if row is not None else entry.lifecycle
            if to_state not in TRANSITIONS[current]:
                allowed = ", ".join(TRANSITIONS[current]) or "none (retired is final)"
                raise Conflict(f"{entry.id} is {current}: it can go to {allowed}, not {to_state}")
            conn.execute(
                "INSERT INTO agent_lifecycle (entry_id, state, changed_at, changed_by, reason) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (entry_id) DO UPDATE SET state = excluded.state, changed_at = excluded.changed_at, "
                "changed_by = excluded.changed_by, reason = excluded.reason",
                (entry.id, to_state, now, by, reason),
            )
            conn.execute(
                "INSERT INTO agent_lifecycle_events (entry_id, from_state, to_state, at, by, reason) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (entry.id, current, to_state, now, by, reason),
            )
        return {"id": entry.id, "from": current, "state": to_state, "at": now, "by": by, "reason": reason}

    def history(self, entry_id: str) -> list[dict[str, Any]]:
        rows = self._db.query(
            "SELECT from_state, to_state, at, by, reason FROM agent_lifecycle_events WHERE entry_id = ? ORDER BY id",
            (entry_id,),
        )
        return [
            {"from": r["from_state"], "to": r["to_state"], "at": r["at"], "by": r["by"], "reason": r["reason"]}
            for r in rows
        ]

    # -- views ---------------------------------------------------------------------------------------------

    def listing(self, seen: list[str]) -> dict[str, Any]:
        """Declared entries with their state, and the `seen` agents no entry matches (discovered, flagged)."""
        declared = []
        for e in self.entries:
            item = e.view()
            item["state"] = self.state_of(e)
            declared.append(item)
        discovered = [
            {"id": a, "discovered": True, "flag": "seen in traces, not declared in the catalog"}
            for a in sorted(seen)
            if self.match(a) is None
        ]
        return {"agents": declared, "discovered": discovered, "error": self.last_error}

    # -- editing through the control plane -----------------------------------------------------------------

    def _dir(self) -> Path:
        if self.directory is None:
            raise NotImplementedFeature("catalog editing needs catalog_dir in the config")
        return self.directory

    def _path(self, name: str) -> Path:
        if name.endswith(".yaml"):
            name = name[:-5]
        if not _NAME.fullmatch(name):
            raise BadRequest(f"invalid catalog file name {name!r}")
        return self._dir() / f"{name}.yaml"

    def files(self) -> list[dict[str, str]]:
        self._look()
        return [{"name": f.stem, "file": str(f)} for f in sorted(self._dir().glob("*.yaml"))]

    def read_file(self, name: str) -> dict[str, str]:
        path = self._path(name)
        self._look()
        if not path.is_file():
            raise NotFound("catalog file not found")
        return {"name": path.stem, "text": path.read_bytes().decode("utf-8", errors="replace")}

    def write_file(self, name: str, text: str, *, by: str) -> dict[str, Any]:
        """Validate (alone and with the other files), write atomically, reload, record the version."""
        path = self._path(name)
        try:
            entries = parse_catalog(text, str(path))
        except ConfigError as e:
            raise BadRequest(f"{e.key}: {e.fault}", extra={"key": e.key}) from None
        with self._copy.editing(self.reload_if_changed):
            return self._write(path, text, entries, by=by)

    def _write(self, path: Path, text: str, entries: list[AgentEntry], *, by: str) -> dict[str, Any]:
        others = {e.id for e in self.entries if Path(e.source_file).name != path.name}
        dup = next((e.id for e in entries if e.id in others), None)
        if dup is not None:
            raise BadRequest(f"duplicate catalog entry {dup!r}", extra={"key": "id"})
        before = path.read_bytes() if path.is_file() else None
        self._replace(path, text.encode())
        self.reload_if_changed(force=True, by=by)
        if self.last_error:
            error = self.last_error  # the catalog as a whole did not load: the file goes back to what it was
            if before is None:
                path.unlink(missing_ok=True)
            else:
                self._replace(path, before)
            self.reload_if_changed(force=True, by=by)
            raise BadRequest(error)
        return {"name": path.stem, "reloaded": True, "entries": [e.id for e in entries]}

    @staticmethod
    def _replace(path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.tmp")  # not *.yaml: a concurrent reload never reads half a file
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def delete_file(self, name: str, *, by: str) -> dict[str, Any]:
        path = self._path(name)
        with self._copy.editing(self.reload_if_changed):
            if not path.is_file():
                raise NotFound("catalog file not found")
            path.unlink()
            self.reload_if_changed(force=True, by=by)
        return {"name": path.stem, "deleted": True}
