"""The write path: one BEGIN IMMEDIATE transaction seals an entry against the chain head, appends it to the
daily file, journals it and updates the index, so several processes writing one workspace keep one chain.

A writer killed between its append and its commit leaves an entry the database does not know. The next
writer adopts it (it was sealed against the head that is still current), so the chain stays unbroken and a
rescan gives the same index. Only a torn partial entry is set aside, into `workspace/recovered/`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from shared.db import Database
from shared.errors import Conflict, Flux7Error

from .chain import ChainReport, seal, verify_chain
from .index import FactIndex
from .workspace import Entry, daily_file, format_entry, list_daily_files, parse_entries

__all__ = ["MemoryFull", "MemoryStore", "StoreOutcome", "WorkspaceError"]

log = logging.getLogger("flux7.memory")

Progress = Callable[[str, int, int], None]  # (file, done, total)


class MemoryFull(Flux7Error):
    status_code = 507

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"memory full: {count} entries (max {limit})")


class WorkspaceError(Flux7Error):
    """The workspace cannot take the write (I/O error); nothing was acknowledged."""


class StoreOutcome(msgspec.Struct):
    key: str
    created: bool
    total: int


class _Head(msgspec.Struct):
    head: str
    last_tx: int
    last_file: str


class MemoryStore:
    def __init__(
        self,
        db: Database,
        root: Path,
        *,
        chain_key: bytes = b"",
        max_entries: int = 10000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.root = root
        self.workspace = root / "workspace"
        self.chain_key = chain_key
        self.max_entries = max_entries
        self.clock = clock
        self.index = FactIndex(db)

    # --- start-up ---

    def open(self) -> None:
        """Bring index and workspace together: import a workspace the database has never seen, re-create
        daily files the database has but the disk lost (a restore), adopt what a crashed writer appended."""
        (self.workspace / "memory").mkdir(parents=True, exist_ok=True)
        known = {r[0] for r in self.db.query("SELECT name FROM memory_files")}
        on_disk = list_daily_files(self.workspace)
        if not known and on_disk:
            log.info("indexing the existing workspace at %s", self.workspace)
            self.rescan()
            return
        missing = sorted(n for n in known if not (self.workspace / n).exists())
        if missing:
            log.warning("re-creating %d daily file(s) from the journal: %s", len(missing), ", ".join(missing))
            self.export(self.root, only=missing)
        with self.db.write() as conn:
            self._recover(conn, set(on_disk) & known)

    # --- writes ---

    @contextmanager
    def _transaction(self, *extra_files: str) -> Iterator[tuple[Any, _Head, int]]:
        with self.db.write() as conn:
            head = self._head(conn)
            now = max(int(self.clock()), head.last_tx)
            self._recover(conn, {head.last_file, daily_file(now), *extra_files})
            yield conn, self._head(conn), now

    def store(
        self,
        key: str,
        value: str,
        *,
        tags: list[str],
        agent: str,
        ttl: int,
        trace: str = "",
        valid_from: int | None = None,
        valid_to: int | None = None,
    ) -> StoreOutcome:
        with self._transaction() as (conn, head, now):
            existing = self.index.head(conn, key, now)
            total = self.index.count(conn, now)
            if existing is None and total >= self.max_entries:
                raise MemoryFull(total, self.max_entries)
            entry = Entry(
                op="store",
                entity=key,
                agent=agent or (existing.agent if existing else ""),
                trace=trace,
                tags=tags,
                ttl=ttl,
                created=existing.created if existing else now,
                updated=now,
                valid_from=valid_from,
                valid_to=valid_to,
                body=value,
            )
            sealed = self._append(conn, entry, head)
            self.index.apply_store(conn, sealed)
            return StoreOutcome(key=sealed.entity, created=existing is None, total=total + (existing is None))

    def forget(self, *, key: str, tags: list[str], agent: str, trace: str = "") -> tuple[list[str], int]:
        """Tombstones for the key and/or the tags; returns the keys removed and the live count left."""
        removed: set[str] = set()
        with self._transaction() as (conn, head, now):
            if key:
                entry = Entry(op="delete", entity=key, agent=agent, trace=trace, deleted=now)
                sealed = self._append(conn, entry, head)
                head = self._head(conn)
                if self.index.apply_delete(conn, sealed.entity, now):
                    removed.add(sealed.entity)
            if tags:
                entry = Entry(op="delete_tags", tags=tags, agent=agent, trace=trace, deleted=now)
                self._append(conn, entry, head)
                removed.update(self.index.apply_delete_tags(conn, tags, now))
            return sorted(removed), self.index.count(conn, now)

    def prune(self) -> int:
        with self.db.write() as conn:
            return self.index.prune(conn, int(self.clock()))

    def count(self) -> int:
        return self.index.count(self.db.reader, int(self.clock()))

    def _head(self, conn: Any) -> _Head:
        row = conn.execute("SELECT head, last_tx, last_file FROM memory_chain WHERE id = 1").fetchone()
        return _Head(head=row[0], last_tx=row[1], last_file=row[2])

    def _file_state(self, conn: Any, name: str) -> tuple[int, int]:
        row = conn.execute("SELECT size, lines FROM memory_files WHERE name = ?", (name,)).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def _set_file_state(self, conn: Any, name: str, size: int, lines: int) -> None:
        conn.execute(
            "INSERT INTO memory_files (name, size, lines) VALUES (?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET size = excluded.size, lines = excluded.lines",
            (name, size, lines),
        )

    def _journal(self, conn: Any, name: str, offset: int, chunk: bytes, e: Entry | None) -> None:
        conn.execute(
            "INSERT INTO memory_journal (file, offset, chunk, op, entity, hash) VALUES (?, ?, ?, ?, ?, ?)",
            (name, offset, chunk, e.op if e else "", e.entity if e else "", e.hash if e else ""),
        )

    def _append(self, conn: Any, entry: Entry, head: _Head) -> Entry:
        """Seal the entry against the head, append it, journal it and move the head. Returns it as parsed."""
        entry.prev, entry.hash = "", ""
        draft = parse_entries(format_entry(entry).encode("utf-8", "surrogateescape")).entries
        if len(draft) != 1:
            raise WorkspaceError("entry does not parse back; refusing to write it")
        entry.prev, entry.hash = head.head, seal(self.chain_key, draft[0], head.head)
        block = format_entry(entry).encode("utf-8", "surrogateescape")
        name = daily_file(entry.when)
        size, lines = self._file_state(conn, name)
        path = self.workspace / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(block)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as exc:
            raise WorkspaceError(f"failed to write markdown: {exc.strerror or exc}") from exc
        parsed = parse_entries(block, name, first_line=lines + 1).entries[0]
        parsed.start, parsed.end = size, size + len(block)
        self._journal(conn, name, size, block, parsed)
        self._set_file_state(conn, name, size + len(block), lines + block.count(b"\n"))
        conn.execute(
            "UPDATE memory_chain SET head = ?, last_tx = ?, last_file = ? WHERE id = 1",
            (parsed.hash, entry.when, name),
        )
        return parsed

    def _recover(self, conn: Any, names: set[str]) -> None:
        """Adopt entries appended to these files after the database last recorded them."""
        for name in sorted(n for n in names if n):
            size, lines = self._file_state(conn, name)
            path = self.workspace / name
            try:
                actual = path.stat().st_size
            except FileNotFoundError:
                actual = 0
            if actual == size:
                continue
            if actual < size:
                log.warning("%s shrank outside mem7 (%d < %d bytes); run `mem7 rescan`", path, actual, size)
                data = path.read_bytes() if actual else b""
                self._set_file_state(conn, name, len(data), data.count(b"\n"))
                continue
            with path.open("rb") as fh:
                fh.seek(size)
                tail = fh.read(actual - size)
            self._adopt(conn, name, size, lines, tail, truncate_torn=True)

    def _adopt(
        self,
        conn: Any,
        name: str,
        size: int,
        lines: int,
        tail: bytes,
        *,
        truncate_torn: bool,
        warn: bool = True,
    ) -> None:
        parsed = parse_entries(tail, name, first_line=lines + 1)
        head = self._head(conn)
        new_head, last_tx = head.head, head.last_tx
        for e in parsed.entries:
            chunk = tail[e.start : e.end]
            e.start, e.end = size + e.start, size + e.end
            self._journal(conn, name, e.start, chunk, e)
            conn.execute("SAVEPOINT adopt")
            try:
                self.index.apply(conn, e)
            except Exception:  # one unreadable entry must not stop every later write
                conn.execute("ROLLBACK TO adopt")
                log.exception("could not index %s line %d (%s); run `mem7 rescan`", name, e.line, e.entity)
            conn.execute("RELEASE adopt")
            if e.hash:
                new_head = e.hash
            last_tx = max(last_tx, e.when)
        consumed = parsed.rest
        rest = tail[consumed:]
        if rest and parsed.torn and truncate_torn:
            aside = self.workspace / "recovered" / f"{Path(name).stem}.{size + consumed}.torn"
            aside.parent.mkdir(parents=True, exist_ok=True)
            aside.write_bytes(rest)
            os.truncate(self.workspace / name, size + consumed)
            log.warning("set aside a torn entry at the end of %s into %s", name, aside)
        elif rest:
            self._journal(conn, name, size + consumed, rest, None)
            consumed = len(tail)
        if parsed.entries and warn:
            log.warning("adopted %d entries appended to %s by an unfinished write", len(parsed.entries), name)
        self._set_file_state(conn, name, size + consumed, lines + tail[:consumed].count(b"\n"))
        conn.execute(
            "UPDATE memory_chain SET head = ?, last_tx = ?, last_file = ? WHERE id = 1",
            (new_head, last_tx, name if parsed.entries else head.last_file),
        )

    # --- whole-workspace operations ---

    def rescan(self, progress: Progress | None = None) -> int:
        """Drop the index and journal and replay the markdown, file by file, in file order."""
        names = list_daily_files(self.workspace)
        with self.db.write() as conn:
            self.index.reset(conn)
            conn.execute("DELETE FROM memory_journal")
            conn.execute("DELETE FROM memory_files")
            conn.execute("UPDATE memory_chain SET head = '', last_tx = 0, last_file = '' WHERE id = 1")
            for i, name in enumerate(names):
                data = (self.workspace / name).read_bytes()
                self._adopt(conn, name, 0, 0, data, truncate_torn=(i == len(names) - 1), warn=False)
                if progress:
                    progress(name, i + 1, len(names))
            return self.index.count(conn, int(self.clock()))

    def export(
        self,
        root: Path,
        *,
        force: bool = False,
        only: list[str] | None = None,
        progress: Progress | None = None,
    ) -> list[str]:
        """Re-create the daily files from the journal under `root/workspace`. Returns the files written."""
        names = only or [r[0] for r in self.db.query("SELECT DISTINCT file FROM memory_journal ORDER BY 1")]
        target = root / "workspace"
        written: list[str] = []
        for i, name in enumerate(names):
            rows = self.db.query("SELECT chunk FROM memory_journal WHERE file = ? ORDER BY seq", (name,))
            data = b"".join(bytes(r[0]) for r in rows)
            path = target / name
            if path.exists():
                if path.read_bytes() == data:
                    if progress:
                        progress(name, i + 1, len(names))
                    continue
                if not force:
                    raise Conflict(f"{path} exists and differs from the journal (use --force to overwrite)")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".md.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
            written.append(name)
            if progress:
                progress(name, i + 1, len(names))
        return written

    def verify(self) -> ChainReport:
        # The head is read first: entries written during the walk only lengthen the chain past it.
        return verify_chain(self.workspace, self.chain_key, head=self._head(self.db.reader).head)

    def entries(self, *, containing: str = "") -> Iterator[Entry]:
        """Every workspace entry in order, skipping files that cannot mention `containing` (a key)."""
        needle = containing.encode("utf-8", "surrogateescape")
        for name in list_daily_files(self.workspace):
            data = (self.workspace / name).read_bytes()
            if needle and needle not in data and b"[delete-tags:" not in data:
                continue
            yield from parse_entries(data, name).entries
