"""The trace store: SQLite rows plus the chained JSONL file, one chain for every worker process."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from operator import add, sub
from pathlib import Path
from typing import Any, cast

import msgspec

from flux7.shared.metrics import _ADD as METRIC_ADD
from flux7.shared.metrics import _SET as METRIC_SET
from flux7.shared.store.db import Database
from flux7.shared.store.group_commit import GroupCommit, SummedUpserts, multi_row_sql
from flux7.shared.store.private_files import private_dir
from flux7.shared.tracing.chain import JsonlAppender, Verifier, last_envelope, seal
from flux7.shared.tracing.entry import (
    SessionView,
    TraceEntry,
    decode_entry,
    encode_entry,
    format_timestamp,
    normalise,
    normalised,
)

__all__ = ["TraceStore"]

log = logging.getLogger("flux7.tracing")

_STATS = (
    "total",
    "allowed",
    "denied",
    "human_approval",
    "errors",
    "estimated_input_tokens",
    "estimated_output_tokens",
)
# The chain head's row holds the /health counts too (migration 0022): one UPDATE moves both.
_MOVE_HEAD = f"UPDATE trace_chain SET seq = ?, hash = ?, {', '.join(f'{k} = {k} + ?' for k in _STATS)} WHERE id = 1"
_ENTRY_SQL = "SELECT l.line FROM traces t JOIN trace_lines l ON l.seq = t.line_seq"


def _blob(value: Any) -> bytes:
    # Lines are stored as BLOBs; a hand edit in the database may have turned one into TEXT.
    return value.encode() if isinstance(value, str) else bytes(value)


def _contribution(e: TraceEntry) -> tuple[int, ...]:
    """What an entry adds to the /health counts, in _STATS order."""
    policy = e.policy
    return (
        1,
        policy == "allow",
        policy == "deny",
        policy == "human_approval",
        # A failed execution, not a refusal: denies, stops and limits carry their reason in `error` too.
        bool(e.error) and (policy == "allow" or e.status_code >= 500),
        e.estimated_input_tokens,
        e.estimated_output_tokens,
    )


class NewRow:
    """A new call's first trace row; `also(conn)` runs in its transaction (its metrics, its rate-limit count)."""

    __slots__ = ("also", "entry")

    def __init__(self, entry: TraceEntry, also: Callable[[Any], None] | None) -> None:
        self.entry = entry
        self.also = also


class Revision:
    """The next revision of a call's row; `also(conn)` runs in its transaction when the row exists."""

    __slots__ = ("also", "changes", "current", "row_id")

    def __init__(
        self,
        row_id: int,
        changes: dict[str, Any],
        also: Callable[[Any], None] | None,
        current: TraceEntry | None = None,
    ) -> None:
        self.row_id = row_id
        self.changes = changes
        self.also = also
        self.current = current  # the row's newest revision when the caller holds it: not read again


def _insert_rows(
    conn: Any, head: str, rows: list[tuple[Any, ...]], tail: str = "", *, numbered: bool = False
) -> dict[int, int]:
    """A multi-row INSERT (chunked under SQLite's parameter bound). With a RETURNING tail, {first column: second
    column} of what it returned. `numbered` (SQLite, a table whose rowid SQLite picks): {last column: the row's id}
    from each statement's lastrowid instead of a RETURNING clause, which costs twice the insert of one row (SQLite
    runs the statement into a temporary table first). A multi-row VALUES inserts its rows in order, under the write
    lock nothing else inserts meanwhile, and AUTOINCREMENT never reuses an id: the rows of one statement are
    numbered lastrowid - n + 1 ... lastrowid."""
    width = len(rows[0])
    returned: dict[int, int] = {}
    step = max(1, 30000 // width)
    for i in range(0, len(rows), step):
        part = rows[i : i + step]
        cur = conn.execute(multi_row_sql(head, width, len(part), tail), [x for row in part for x in row])
        if tail:
            returned.update((int(a), int(b)) for a, b in cur.fetchall())
        elif numbered:
            first = int(cur.lastrowid) - len(part) + 1
            returned.update((int(row[-1]), first + k) for k, row in enumerate(part))
    return returned


class TraceStore:
    """Rows and chain live in SQLite; the JSONL file (when configured) receives each line inside the same
    write transaction, so file order is chain order across processes."""

    def __init__(self, db: Database, *, key: bytes | None = None, appender: JsonlAppender | None = None) -> None:
        self.db = db
        self.key = key or None
        self.appender = appender
        self.group: GroupCommit[NewRow | Revision, tuple[int, TraceEntry] | TraceEntry | None] = GroupCommit(
            db, self.apply, row_lock="trace_chain"
        )
        # SQLite numbers new rows through lastrowid and moves revised rows with one prepared UPDATE per row: its
        # RETURNING and its UPDATE ... FROM (VALUES ...) cost more than the writes themselves (docs/benchmarks.md).
        # PostgreSQL keeps the one-statement forms, each a round trip saved.
        self._sqlite = db.engine == "sqlite"

    # -- writing ---------------------------------------------------------------------------------------------

    def adopt_file_head(self) -> None:
        """Continue the file's chain when the file is ahead of the database (a restored database, or a file
        written by the reference mesh7), so the file keeps one unbroken chain."""
        if self.appender is None:
            return
        env = last_envelope(self.appender.path) or last_envelope(self.appender.old_path)
        if env is None:
            return
        with self.db.write(row_lock="trace_chain") as conn:
            seq, digest = conn.execute("SELECT seq, hash FROM trace_chain WHERE id = 1").fetchone()
            if env.seq > seq:
                log.warning(
                    "trace chain: the file is ahead of the database (seq %d > %d); continuing it",
                    env.seq,
                    seq,
                )
                conn.execute("UPDATE trace_chain SET seq = ?, hash = ? WHERE id = 1", (env.seq, env.hash))
            elif env.seq == seq and env.hash != digest:
                log.warning("trace chain: the file's head differs from the database's at seq %d", seq)

    def record(self, entry: TraceEntry, also: Callable[[Any], None] | None = None) -> TraceEntry:
        """Store a new call. Durable on return: row and line committed, line appended to the file.
        `also(conn)` runs inside the same transaction (the call's metrics), so one commit covers both."""
        return self.begin(entry, also)[1]

    def begin(self, entry: TraceEntry, also: Callable[[Any], None] | None = None) -> tuple[int, TraceEntry]:
        """`record`, returning the call's row id as well, so its outcome revises this very row even when
        another call shares its trace id."""
        with self.db.write(row_lock="trace_chain") as conn:
            result = self.apply(conn, [NewRow(entry, also)])[0]
        assert isinstance(result, tuple)
        return result

    def insert(self, conn: Any, entry: TraceEntry) -> tuple[int, TraceEntry]:
        """A new call inside the caller's write transaction (an approval stored with its trace in one commit)."""
        result = self.apply(conn, [NewRow(entry, None)])[0]
        assert isinstance(result, tuple)
        return result

    def update(self, trace_id: str, also: Callable[[Any], None] | None = None, **changes: Any) -> TraceEntry | None:
        """Append a revision of the newest call with this trace id; None when there is none. `also(conn)` runs
        inside the same transaction (the call's final metrics), even when there is no such call."""
        changes.pop("revision", None)
        with self.db.write(row_lock="trace_chain") as conn:
            if also is not None:
                also(conn)
            row = conn.execute(
                "SELECT t.id FROM traces t WHERE t.trace_id = ? ORDER BY t.id DESC LIMIT 1", (trace_id,)
            ).fetchone()
            if row is None:
                return None
            new = self.apply(conn, [Revision(int(row[0]), changes, None)])[0]
        return new if isinstance(new, TraceEntry) else None

    def revise(
        self, row_id: int, changes: dict[str, Any], also: Callable[[Any], None] | None = None
    ) -> TraceEntry | None:
        """Append a revision of one call (by row id); None when there is no such row."""
        with self.db.write(row_lock="trace_chain") as conn:
            new = self.apply(conn, [Revision(row_id, changes, also)])[0]
        return new if isinstance(new, TraceEntry) else None

    # -- grouped writes: one transaction for what concurrent calls wrote meanwhile (shared/store/group_commit.py) ---

    def begin_grouped(
        self, entry: TraceEntry, also: Callable[[Any], None] | None = None
    ) -> Awaitable[tuple[int, TraceEntry]]:
        """`begin`, committed with the rows other calls of this process write at the same time. The group's own
        awaitable, no coroutine of its own: a new row's result is always (row id, stored entry)."""
        return cast("Awaitable[tuple[int, TraceEntry]]", self.group.submit(NewRow(entry, also)))

    def revise_grouped(
        self,
        row_id: int,
        changes: dict[str, Any],
        also: Callable[[Any], None] | None = None,
        current: TraceEntry | None = None,
    ) -> Awaitable[TraceEntry | None]:
        """`revise`, committed with the rows other calls of this process write at the same time: the new revision,
        None when there is no such row (a revision's result is never a tuple)."""
        return cast("Awaitable[TraceEntry | None]", self.group.submit(Revision(row_id, changes, also, current)))

    def apply(self, conn: Any, items: Sequence[NewRow | Revision]) -> list[tuple[int, TraceEntry] | TraceEntry | None]:
        """Write `items` in order inside the caller's transaction: new rows ((row id, stored entry)) and
        revisions (the new revision, None when the row does not exist). Their lines extend the chain in order.
        The statements do not grow with the items: the chain head is read once and moved once (with the stats),
        the lines, the rows and the pointers go in one statement each, the hooks' metrics summed into one."""
        # Locked to commit (PostgreSQL): a writer outside the trace path's row_lock still extends one chain.
        head = conn.execute(f"SELECT seq, hash FROM trace_chain WHERE id = 1{self.db.for_update}").fetchone()
        head_seq, head_hash = head
        seq, digest = int(head_seq), str(head_hash)
        current = self._current(conn, [i.row_id for i in items if isinstance(i, Revision) and i.current is None])
        lines: list[tuple[int, bytes]] = []
        rows: list[tuple[Any, ...]] = []  # new rows, by line seq
        moved: list[tuple[int, int]] = []  # (row id, line seq): the usual revision, only the pointer moves
        rekeyed: list[tuple[Any, ...]] = []
        stats = [0] * len(_STATS)
        results: list[tuple[int, TraceEntry] | TraceEntry | None] = []
        for item in items:
            if isinstance(item, NewRow):
                entry, ts = normalised(item.entry)
                seq += 1
                line, digest = seal(encode_entry(entry), self.key, seq, digest)
                lines.append((seq, line))
                rows.append((entry.trace_id, entry.session_id, entry.agent_id, entry.tool, ts, seq))
                stats = list(map(add, stats, _contribution(entry)))
                results.append((seq, entry))  # the seq becomes the row id once the rows are inserted
                continue
            old = current.get(item.row_id) or item.current
            if old is None:
                results.append(None)
                continue
            changes = item.changes
            if "revision" in changes:  # the store numbers revisions itself
                changes = {k: v for k, v in changes.items() if k != "revision"}
            new = normalise(msgspec.structs.replace(old, **changes, revision=old.revision + 1))
            seq += 1
            line, digest = seal(encode_entry(new), self.key, seq, digest)
            lines.append((seq, line))
            if (new.session_id, new.agent_id, new.tool) == (old.session_id, old.agent_id, old.tool):
                # No index on those columns is rewritten.
                moved.append((item.row_id, seq))
            else:
                rekeyed.append((seq, new.session_id, new.agent_id, new.tool, item.row_id))
            stats = list(map(add, stats, map(sub, _contribution(new), _contribution(old))))
            current[item.row_id] = new
            results.append(new)
        if lines:
            _insert_rows(conn, "INSERT INTO trace_lines (seq, line) VALUES ", lines)
        if rows:
            head = "INSERT INTO traces (trace_id, session_id, agent_id, tool, ts_ns, line_seq) VALUES "
            ids = (
                _insert_rows(conn, head, rows, numbered=True)
                if self._sqlite
                else _insert_rows(conn, head, rows, " RETURNING line_seq, id")
            )
            results = [(ids[r[0]], r[1]) if isinstance(r, tuple) else r for r in results]
        if moved and self._sqlite:
            conn.executemany("UPDATE traces SET line_seq = ? WHERE id = ?", [(seq, row_id) for row_id, seq in moved])
        elif moved:
            values = ", ".join("(?, ?)" for _ in moved)
            conn.execute(
                f"UPDATE traces SET line_seq = v.column2 FROM (VALUES {values}) AS v WHERE traces.id = v.column1",
                [x for pair in moved for x in pair],
            )
        for rekey in rekeyed:
            conn.execute("UPDATE traces SET line_seq = ?, session_id = ?, agent_id = ?, tool = ? WHERE id = ?", rekey)
        if lines:
            conn.execute(_MOVE_HEAD, (seq, digest, *stats))
        hooks = [
            item.also
            for item, result in zip(items, results, strict=True)
            if item.also is not None and result is not None
        ]
        if hooks:
            summed = SummedUpserts(conn, add=METRIC_ADD, put=METRIC_SET)
            for hook in hooks:
                hook(summed)
            summed.flush()
        # Last step inside the transaction: the SQL above succeeded, and holding the write lock keeps the file
        # in chain order across processes.
        self._write_file([line for _, line in lines])
        return results

    @staticmethod
    def _current(conn: Any, row_ids: list[int]) -> dict[int, TraceEntry]:
        """The newest revision of each of these calls, in one statement."""
        if not row_ids:
            return {}
        unique = sorted(set(row_ids))
        marks = ", ".join("?" for _ in unique)
        found = conn.execute(
            f"SELECT t.id, l.line FROM traces t JOIN trace_lines l ON l.seq = t.line_seq WHERE t.id IN ({marks})",
            unique,
        ).fetchall()
        return {int(row_id): decode_entry(_blob(line)) for row_id, line in found}

    def _write_file(self, lines: list[bytes]) -> None:
        if self.appender is None or not lines:
            return
        try:
            self.appender.append_many(lines)
        except OSError:
            log.exception("trace file %s: lines not written", self.appender.path)

    # -- reading ---------------------------------------------------------------------------------------------

    def _entries(self, where: str, params: tuple[Any, ...], limit: int) -> list[TraceEntry]:
        rows = self.db.query(f"{_ENTRY_SQL}{where} ORDER BY t.id DESC LIMIT ?", (*params, limit))
        return [decode_entry(_blob(r[0])) for r in rows]

    def rows_awaiting(self, trace_id: str, approval_id: str) -> list[int]:
        """The rows of `trace_id` still answering "pending" (202, no approval status) for this approval: the
        calls whose answer was "ask again later" (MCP's claim flow)."""
        rows = self.db.query(
            "SELECT t.id, l.line FROM traces t JOIN trace_lines l ON l.seq = t.line_seq WHERE t.trace_id = ?",
            (trace_id,),
        )
        out: list[int] = []
        for r in rows:
            entry = decode_entry(_blob(r[1]))
            if entry.approval_id == approval_id and entry.status_code == 202 and not entry.approval_status:
                out.append(int(r[0]))
        return out

    def get(self, trace_id: str) -> TraceEntry | None:
        found = self._entries(" WHERE t.trace_id = ?", (trace_id,), 1)
        return found[0] if found else None

    def query(
        self, agent: str = "", tool: str = "", trace: str = "", session: str = "", limit: int = 100
    ) -> list[TraceEntry]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("agent_id", agent),
            ("tool", tool),
            ("trace_id", trace),
            ("session_id", session),
        ):
            if value:
                clauses.append(f"t.{column} = ?")
                params.append(value)
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        return self._entries(where, tuple(params), limit)

    def counts(self) -> dict[str, int]:
        row = self.db.query_one(f"SELECT {', '.join(_STATS)} FROM trace_chain WHERE id = 1")
        return {k: int(row[k]) if row else 0 for k in _STATS}

    def sessions(self, limit: int = 50) -> list[SessionView]:
        rows = self.db.query(
            "SELECT session_id, count(*) AS n, min(ts_ns) AS first, max(ts_ns) AS last,"
            f" {self.db.json_array_distinct('tool')} AS tools,"
            " (SELECT agent_id FROM traces f WHERE f.session_id = t.session_id ORDER BY f.id LIMIT 1)"
            " AS agent FROM traces t WHERE session_id != ''"
            " GROUP BY session_id ORDER BY last DESC, session_id LIMIT ?",
            (limit,),
        )
        return [
            SessionView(
                session_id=r["session_id"],
                agent_id=r["agent"],
                event_count=int(r["n"]),
                first_seen=format_timestamp(int(r["first"])),
                last_seen=format_timestamp(int(r["last"])),
                tools=json.loads(r["tools"]),
            )
            for r in rows
        ]

    def why(self, trace_id: str, depth: int = 10) -> list[TraceEntry]:
        """The chain of authority behind a call, oldest first, following parent_trace_id. Bounded by depth and
        by a seen-set, so a cycle in the data cannot hang the caller."""
        entry = self.get(trace_id)
        if entry is None:
            return []
        chain = [entry]
        seen = {trace_id}
        while len(chain) < max(depth, 1):
            parent_id = chain[0].parent_trace_id
            if not parent_id or parent_id in seen:
                break
            parent = self.get(parent_id)
            if parent is None:  # gone: stop rather than pretend the chain ends at a root
                break
            seen.add(parent_id)
            chain.insert(0, parent)
        return chain

    def outcome_unknown(self, limit: int = 100) -> tuple[int, list[dict[str, Any]]]:
        """Calls whose newest revision is still the intent written before the upstream call (status_code 0):
        in flight, or the server stopped during the call. (count, the newest `limit` of them)."""
        where = f" WHERE {self.db.json_number('l.line', 'status_code')} = 0"
        row = self.db.query_one(f"SELECT count(*) FROM traces t JOIN trace_lines l ON l.seq = t.line_seq{where}")
        found = self.db.query(
            f"SELECT l.seq, l.line {_ENTRY_SQL[len('SELECT l.line') :]}{where} ORDER BY t.id DESC LIMIT ?", (limit,)
        )
        calls = []
        for seq, line in found:
            e = decode_entry(_blob(line))
            calls.append(
                {
                    "trace_id": e.trace_id,
                    "seq": int(seq),
                    "agent_id": e.agent_id,
                    "tool": e.tool,
                    "timestamp": e.timestamp,
                }
            )
        return (int(row[0]) if row else 0), calls

    def head(self) -> tuple[int, str]:
        row = self.db.query_one("SELECT seq, hash FROM trace_chain WHERE id = 1")
        return (int(row[0]), str(row[1])) if row else (0, "")

    def iter_lines(self, batch: int = 1000) -> Iterator[tuple[int, bytes]]:
        """(seq, line) of every stored line, in chain order, read in batches."""
        after = -1
        while True:
            rows = self.db.query("SELECT seq, line FROM trace_lines WHERE seq > ? ORDER BY seq LIMIT ?", (after, batch))
            if not rows:
                return
            for seq, line in rows:
                yield int(seq), _blob(line)
            after = int(rows[-1][0])

    def export_jsonl(self, path: str | Path) -> int:
        """Write every stored line to a JSONL file (atomically): the trace file as a restore re-creates it."""
        target = Path(path)
        private_dir(target.parent)
        tmp = target.with_name(target.name + ".tmp")
        n = 0
        with open(tmp, "wb") as f:
            for _, line in self.iter_lines():
                f.write(line + b"\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        return n

    def verify_stored(self, label: str) -> Verifier:
        """Verify the chain as stored in SQLite (used when no trace file is configured)."""
        v = Verifier(self.key)
        for n, (_, line) in enumerate(self.iter_lines(), start=1):
            if not v.feed(label, n, line):
                break
        return v
