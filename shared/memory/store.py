"""The write path: one BEGIN IMMEDIATE transaction seals an entry against the chain head, appends it to the
daily file, journals it and updates the index, so several processes writing one workspace keep one chain.

A writer killed between its append and its commit leaves an entry the database does not know. The next
writer adopts it (it was sealed against the head that is still current), so the chain stays unbroken and a
rescan gives the same index. Only a torn partial entry is set aside, into `workspace/recovered/`.

Long-term entries go to `workspace/MEMORY.md` instead of the daily file, sealed into the same chain: the
chain is one sequence over two append-only streams (the daily files in order, MEMORY.md), so rescan,
adoption and verify interleave the two by following the seals (`chain.chain_order`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Container, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from flux7.shared.errors import BadRequest, Conflict, Flux7Error
from flux7.shared.memory.chain import ChainReport, chain_order, seal, verify_chain
from flux7.shared.memory.index import FactIndex
from flux7.shared.memory.workspace import (
    LONG_TERM_FILE,
    LONG_TERM_HEADER,
    LONG_TERM_TAG,
    Entry,
    Parsed,
    daily_file,
    format_entry,
    list_daily_files,
    list_workspace_files,
    parse_entries,
)
from flux7.shared.store.db import Database
from flux7.shared.store.private_files import PRIVATE_FILE, private_dir, write_private

__all__ = ["LongTermError", "MemoryFull", "MemoryStore", "StoreOutcome", "WorkspaceError"]

log = logging.getLogger("flux7.memory")

Progress = Callable[[str, int, int], None]  # (file, done, total)


class MemoryFull(Flux7Error):
    status_code = 507

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"memory full: {count} entries (max {limit})")


class LongTermError(BadRequest):
    """A write that asks for a long-term entry and for something a long-term entry cannot have."""


class WorkspaceError(Flux7Error):
    """The workspace cannot take the write (I/O error); nothing was acknowledged."""


class StoreOutcome(msgspec.Struct):
    key: str
    created: bool
    total: int


class _Tail(msgspec.Struct):
    """Bytes of one file past what the database recorded (all of it on a rescan)."""

    name: str
    size: int
    lines: int
    data: bytes


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
        text_search_config: str = "simple",
    ) -> None:
        self.db = db
        self.root = root
        self.workspace = root / "workspace"
        self.chain_key = chain_key
        self.max_entries = max_entries
        self.clock = clock
        self.index = FactIndex(db, text_search_config=text_search_config)

    # --- start-up ---

    def open(self) -> None:
        """Bring index and workspace together: import a workspace the database has never seen, re-create
        files the database has but the disk lost (a restore), adopt what a crashed writer appended, and
        create MEMORY.md on a new workspace."""
        private_dir(self.workspace / "memory")
        known = {r[0] for r in self.db.query("SELECT name FROM memory_files")}
        on_disk = list_workspace_files(self.workspace)
        if not known and on_disk:
            log.info("indexing the existing workspace at %s", self.workspace)
            self.rescan()
        else:
            missing = sorted(n for n in known if not (self.workspace / n).exists())
            if missing:
                log.warning("re-creating %d workspace file(s) from the journal: %s", len(missing), ", ".join(missing))
                self.export(self.root, only=missing)
        with self.db.write() as conn:
            # Every file, known or not: a crashed writer may have begun a file the database never recorded,
            # and the tails of all files are adopted together, in seal order.
            self._recover(conn, {*known, *on_disk, LONG_TERM_FILE})
            self._create_long_term_file(conn)

    def _create_long_term_file(self, conn: Any) -> None:
        """Write MEMORY.md's header and journal it (so `export` re-creates it), unless it exists already."""
        known = conn.execute("SELECT 1 FROM memory_files WHERE name = ?", (LONG_TERM_FILE,)).fetchone()
        path = self.workspace / LONG_TERM_FILE
        if known is not None or path.exists():
            return
        try:
            write_private(path, LONG_TERM_HEADER, exclusive=True)
        except OSError as exc:
            raise WorkspaceError(f"failed to create {LONG_TERM_FILE}: {exc.strerror or exc}") from exc
        self._journal(conn, LONG_TERM_FILE, 0, LONG_TERM_HEADER, None)
        self._set_file_state(conn, LONG_TERM_FILE, len(LONG_TERM_HEADER), LONG_TERM_HEADER.count(b"\n"))

    # --- writes ---

    @contextmanager
    def _transaction(self, *extra_files: str) -> Iterator[tuple[Any, _Head, int]]:
        with self.db.write() as conn:
            head = self._head(conn)
            now = max(int(self.clock()), head.last_tx)
            self._recover(conn, {head.last_file, daily_file(now), LONG_TERM_FILE, *extra_files})
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
        long_term: bool | None = None,
    ) -> StoreOutcome:
        """`long_term`: True writes to MEMORY.md, False to the daily file; None (not asked) means the tag
        `long-term` asks for it, and otherwise an update of a long-term key stays long-term."""
        if LONG_TERM_TAG in tags:
            if long_term is False:
                raise LongTermError(f"long_term is false but the tags include {LONG_TERM_TAG}")
            long_term = True
        with self._transaction() as (conn, head, now):
            existing = self.index.head(conn, key, now)
            total = self.index.count(conn, now)
            if existing is None and total >= self.max_entries:
                raise MemoryFull(total, self.max_entries)
            if long_term is None:
                long_term = existing is not None and existing.long_term
            if long_term:
                if ttl > 0:
                    stays = " (the key is long-term: pass long_term false to move it out)" if existing else ""
                    raise LongTermError(f"a long-term memory never expires: ttl must be 0{stays}")
                if LONG_TERM_TAG not in tags:
                    tags = [*tags, LONG_TERM_TAG]
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
            sealed = self._append(conn, entry, head, LONG_TERM_FILE if long_term else daily_file(now))
            self.index.apply_store(conn, sealed)
            return StoreOutcome(key=sealed.entity, created=existing is None, total=total + (existing is None))

    def forget(self, *, key: str, tags: list[str], agent: str, trace: str = "") -> tuple[list[str], int]:
        """Tombstones for the key and/or the tags; returns the keys removed and the live count left. A
        long-term key's tombstone goes to MEMORY.md, beside the entries it ends."""
        removed: set[str] = set()
        with self._transaction() as (conn, head, now):
            if key:
                existing = self.index.head(conn, key, now)
                name = LONG_TERM_FILE if existing is not None and existing.long_term else daily_file(now)
                entry = Entry(op="delete", entity=key, agent=agent, trace=trace, deleted=now)
                sealed = self._append(conn, entry, head, name)
                head = self._head(conn)
                if self.index.apply_delete(conn, sealed.entity, now):
                    removed.add(sealed.entity)
            if tags:
                entry = Entry(op="delete_tags", tags=tags, agent=agent, trace=trace, deleted=now)
                self._append(conn, entry, head, daily_file(now))
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
            # "offset" quoted: a reserved word in PostgreSQL (a plain identifier to SQLite)
            'INSERT INTO memory_journal (file, "offset", chunk, op, entity, hash) VALUES (?, ?, ?, ?, ?, ?)',
            (name, offset, chunk, e.op if e else "", e.entity if e else "", e.hash if e else ""),
        )

    def _append(self, conn: Any, entry: Entry, head: _Head, name: str = "") -> Entry:
        """Seal the entry against the head, append it to `name` (default: its daily file), journal it and
        move the head. Returns it as parsed."""
        entry.prev, entry.hash = "", ""
        draft = parse_entries(format_entry(entry).encode("utf-8", "surrogateescape")).entries
        if len(draft) != 1:
            raise WorkspaceError("entry does not parse back; refusing to write it")
        entry.prev, entry.hash = head.head, seal(self.chain_key, draft[0], head.head)
        block = format_entry(entry).encode("utf-8", "surrogateescape")
        name = name or daily_file(entry.when)
        size, lines = self._file_state(conn, name)
        path = self.workspace / name
        try:
            private_dir(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
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
        tails: list[_Tail] = []
        for name in sorted(n for n in names if n):
            size, lines = self._file_state(conn, name)
            path = self.workspace / name
            try:
                actual = path.stat().st_size
            except FileNotFoundError:
                actual = 0
            if actual == size:
                continue
            if actual < size and self._catch_up(conn, name, actual, size):
                continue
            if actual < size:
                log.warning("%s shrank outside mem7 (%d < %d bytes); run `mem7 rescan`", path, actual, size)
                data = path.read_bytes() if actual else b""
                self._set_file_state(conn, name, len(data), data.count(b"\n"))
                continue
            with path.open("rb") as fh:
                fh.seek(size)
                tails.append(_Tail(name=name, size=size, lines=lines, data=fh.read(actual - size)))
        if tails:
            daily = [t for t in tails if t.name != LONG_TERM_FILE]
            long_term = [t for t in tails if t.name == LONG_TERM_FILE]
            self._adopt(conn, daily, long_term, truncate_torn={t.name for t in tails})

    def _catch_up(self, conn: Any, name: str, actual: int, size: int) -> bool:
        """Append what the journal holds past this file's local end, when it starts exactly there: the entries
        another instance sharing the database (PostgreSQL) wrote into its own copy of the workspace. False when
        the journal does not continue the file (it was cut or edited here), which the caller reports."""
        rows = conn.execute(
            'SELECT "offset", chunk FROM memory_journal WHERE file = ? AND "offset" >= ? ORDER BY seq', (name, actual)
        ).fetchall()
        if not rows or int(rows[0][0]) != actual:
            return False
        data = b"".join(bytes(r[1]) for r in rows)
        if actual + len(data) != size:
            return False
        path = self.workspace / name
        try:
            private_dir(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as exc:
            raise WorkspaceError(f"failed to bring {name} up to date: {exc.strerror or exc}") from exc
        log.info("%s: %d bytes written by another instance copied from the journal", name, len(data))
        return True

    def _adopt(
        self,
        conn: Any,
        daily: Iterable[_Tail],
        long_term: Iterable[_Tail] = (),
        *,
        truncate_torn: Container[str],
        warn: bool = True,
    ) -> None:
        """Journal and index the entries in these tails (the daily files' in file order; MEMORY.md's) in
        seal order, then move the head past them.

        Tails are read lazily (a rescan holds a file or two at a time, not the workspace); a file is
        finished (its leftover bytes, its recorded size) once its last entry has been taken."""
        head = self._head(conn)
        new_head, last_tx, last_file = head.head, head.last_tx, head.last_file

        def stream(ts: Iterable[_Tail]) -> Iterator[Entry]:
            for t in ts:
                parsed = parse_entries(t.data, t.name, first_line=t.lines + 1)
                for e in parsed.entries:
                    chunk = t.data[e.start : e.end]
                    e.start, e.end = t.size + e.start, t.size + e.end
                    self._journal(conn, t.name, e.start, chunk, e)
                    yield e  # chain_order reads on only after the loop below is done with it
                self._finish(conn, t, parsed, torn_aside=t.name in truncate_torn, warn=warn)

        for e in chain_order([stream(daily), stream(long_term)], head.head):
            conn.execute("SAVEPOINT adopt")
            try:
                self.index.apply(conn, e)
            except Exception:  # one unreadable entry must not stop every later write
                conn.execute("ROLLBACK TO adopt")
                log.exception("could not index %s line %d (%s); run `mem7 rescan`", e.file, e.line, e.entity)
            conn.execute("RELEASE adopt")
            if e.hash:
                new_head = e.hash
            last_tx, last_file = max(last_tx, e.when), e.file
        conn.execute(
            "UPDATE memory_chain SET head = ?, last_tx = ?, last_file = ? WHERE id = 1",
            (new_head, last_tx, last_file),
        )

    def _finish(self, conn: Any, t: _Tail, parsed: Parsed, *, torn_aside: bool, warn: bool) -> None:
        """After a tail's entries: set a torn partial entry aside (or journal other leftover bytes), and
        record the file's new size."""
        consumed = parsed.rest
        rest = t.data[consumed:]
        if rest and parsed.torn and torn_aside:
            aside = self.workspace / "recovered" / f"{Path(t.name).stem}.{t.size + consumed}.torn"
            private_dir(aside.parent)
            write_private(aside, rest)
            os.truncate(self.workspace / t.name, t.size + consumed)
            log.warning("set aside a torn entry at the end of %s into %s", t.name, aside)
        elif rest:
            self._journal(conn, t.name, t.size + consumed, rest, None)
            consumed = len(t.data)
        if parsed.entries and warn:
            log.warning("adopted %d entries appended to %s by an unfinished write", len(parsed.entries), t.name)
        self._set_file_state(conn, t.name, t.size + consumed, t.lines + t.data[:consumed].count(b"\n"))

    # --- whole-workspace operations ---

    def rescan(self, progress: Progress | None = None) -> int:
        """Drop the index and journal and replay the markdown in seal order (the daily files in file order,
        MEMORY.md's entries interleaved where their seals put them)."""
        names = list_workspace_files(self.workspace)
        daily = [n for n in names if n != LONG_TERM_FILE]
        # A torn entry is cut off only where a crashed writer could have left it: at the end of a stream.
        torn_ok = {*daily[-1:], LONG_TERM_FILE}

        done = 0

        def tails(group: list[str]) -> Iterator[_Tail]:
            nonlocal done
            for name in group:
                yield _Tail(name=name, size=0, lines=0, data=(self.workspace / name).read_bytes())
                done += 1
                if progress:
                    progress(name, done, len(names))

        with self.db.write() as conn:
            self.index.reset(conn)
            conn.execute("DELETE FROM memory_journal")
            conn.execute("DELETE FROM memory_files")
            conn.execute("UPDATE memory_chain SET head = '', last_tx = 0, last_file = '' WHERE id = 1")
            long_term = [n for n in names if n == LONG_TERM_FILE]
            self._adopt(conn, tails(daily), tails(long_term), truncate_torn=torn_ok, warn=False)
            return self.index.count(conn, int(self.clock()))

    def export(
        self,
        root: Path,
        *,
        force: bool = False,
        only: list[str] | None = None,
        progress: Progress | None = None,
    ) -> list[str]:
        """Re-create the workspace files (daily files, MEMORY.md) from the journal under `root/workspace`.
        Returns the files written."""
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
            private_dir(path.parent)
            tmp = path.with_suffix(".md.tmp")
            write_private(tmp, data)
            os.replace(tmp, path)
            written.append(name)
            if progress:
                progress(name, i + 1, len(names))
        return written

    def verify(self) -> ChainReport:
        # The head is read first: entries written during the walk only lengthen the chain past it.
        return verify_chain(self.workspace, self.chain_key, head=self._head(self.db.reader).head)

    def entries(self, *, containing: str = "") -> Iterator[Entry]:
        """Every workspace entry in seal order, skipping daily files that cannot mention `containing` (a
        key) when MEMORY.md does not mention it either (then the daily files alone give the order)."""
        needle = containing.encode("utf-8", "surrogateescape")
        path = self.workspace / LONG_TERM_FILE
        data = path.read_bytes() if path.is_file() else b""
        long_term = parse_entries(data, LONG_TERM_FILE).entries if not needle or needle in data else []

        def daily() -> Iterator[Entry]:
            for name in list_daily_files(self.workspace):
                data = (self.workspace / name).read_bytes()
                if needle and not long_term and needle not in data and b"[delete-tags:" not in data:
                    continue
                yield from parse_entries(data, name).entries

        yield from chain_order([daily(), long_term])
