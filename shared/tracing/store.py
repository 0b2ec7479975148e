"""The trace store: SQLite rows plus the chained JSONL file, one chain for every worker process."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from ..db import Database
from .chain import JsonlAppender, Verifier, last_envelope, seal
from .entry import TraceEntry, decode_entry, encode_entry, format_timestamp, normalise, parse_timestamp

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
_ENTRY_SQL = "SELECT l.line FROM traces t JOIN trace_lines l ON l.seq = t.line_seq"


def _blob(value: Any) -> bytes:
    # Lines are stored as BLOBs; a hand edit in the database may have turned one into TEXT.
    return value.encode() if isinstance(value, str) else bytes(value)


def _contribution(e: TraceEntry) -> dict[str, int]:
    return {
        "total": 1,
        "allowed": int(e.policy == "allow"),
        "denied": int(e.policy == "deny"),
        "human_approval": int(e.policy == "human_approval"),
        # A failed execution, not a refusal: denies, stops and limits carry their reason in `error` too.
        "errors": int(bool(e.error) and (e.policy == "allow" or e.status_code >= 500)),
        "estimated_input_tokens": e.estimated_input_tokens,
        "estimated_output_tokens": e.estimated_output_tokens,
    }


class TraceStore:
    """Rows and chain live in SQLite; the JSONL file (when configured) receives each line inside the same
    write transaction, so file order is chain order across processes."""

    def __init__(self, db: Database, *, key: bytes | None = None, appender: JsonlAppender | None = None) -> None:
        self.db = db
        self.key = key or None
        self.appender = appender

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
            row_id, stored = self.insert(conn, entry)
            if also is not None:
                also(conn)
        return row_id, stored

    def insert(self, conn: Any, entry: TraceEntry) -> tuple[int, TraceEntry]:
        """A new call inside the caller's write transaction (an approval stored with its trace in one commit)."""
        entry = normalise(entry)
        ts = parse_timestamp(entry.timestamp) or time.time_ns()
        seq, line = self._chain(conn, encode_entry(entry))
        cur = conn.execute(
            "INSERT INTO traces (trace_id, session_id, agent_id, tool, ts_ns, line_seq) VALUES (?, ?, ?, ?, ?, ?)"
            " RETURNING id",
            (entry.trace_id, entry.session_id, entry.agent_id, entry.tool, ts, seq),
        )
        row_id = int(cur.fetchone()[0])
        self._add_stats(conn, _contribution(entry))
        self._write_file(line)
        return row_id, entry

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
            return None if row is None else self._revise(conn, int(row[0]), changes)

    def revise(
        self, row_id: int, changes: dict[str, Any], also: Callable[[Any], None] | None = None
    ) -> TraceEntry | None:
        """Append a revision of one call (by row id); None when there is no such row."""
        with self.db.write(row_lock="trace_chain") as conn:
            new = self._revise(conn, row_id, changes)
            if new is not None and also is not None:
                also(conn)
        return new

    def _revise(self, conn: Any, row_id: int, changes: dict[str, Any]) -> TraceEntry | None:
        changes = {k: v for k, v in changes.items() if k != "revision"}
        row = conn.execute(
            "SELECT l.line FROM traces t JOIN trace_lines l ON l.seq = t.line_seq WHERE t.id = ?", (row_id,)
        ).fetchone()
        if row is None:
            return None
        old = decode_entry(_blob(row[0]))
        new = normalise(msgspec.structs.replace(old, **changes, revision=old.revision + 1))
        seq, line = self._chain(conn, encode_entry(new))
        if (new.session_id, new.agent_id, new.tool) == (old.session_id, old.agent_id, old.tool):
            # The usual revision (an outcome): only the pointer moves, so no index on those columns is rewritten.
            conn.execute("UPDATE traces SET line_seq = ? WHERE id = ?", (seq, row_id))
        else:
            conn.execute(
                "UPDATE traces SET line_seq = ?, session_id = ?, agent_id = ?, tool = ? WHERE id = ?",
                (seq, new.session_id, new.agent_id, new.tool, row_id),
            )
        before, after = _contribution(old), _contribution(new)
        delta = {k: after[k] - before[k] for k in _STATS}
        if any(delta.values()):
            self._add_stats(conn, delta)
        self._write_file(line)
        return new

    def _chain(self, conn: Any, payload: bytes) -> tuple[int, bytes]:
        # Locked to commit (PostgreSQL): a writer outside the trace path's row_lock still extends one chain.
        head = conn.execute(f"SELECT seq, hash FROM trace_chain WHERE id = 1{self.db.for_update}").fetchone()
        head_seq, head_hash = head
        seq = int(head_seq) + 1
        line, digest = seal(payload, self.key, seq, str(head_hash))
        conn.execute("INSERT INTO trace_lines (seq, line) VALUES (?, ?)", (seq, line))
        conn.execute("UPDATE trace_chain SET seq = ?, hash = ? WHERE id = 1", (seq, digest))
        return seq, line

    @staticmethod
    def _add_stats(conn: Any, delta: dict[str, int]) -> None:
        sets = ", ".join(f"{k} = {k} + ?" for k in _STATS)
        conn.execute(f"UPDATE trace_stats SET {sets} WHERE id = 1", tuple(delta[k] for k in _STATS))

    def _write_file(self, line: bytes) -> None:
        # Last step inside the transaction: the SQL above succeeded, and holding the write lock keeps the
        # file in chain order. A file fault is logged, not raised: the row is the durable record and the file
        # can be re-exported from it; verify reports the gap.
        if self.appender is None:
            return
        try:
            self.appender.append(line)
        except OSError:
            log.exception("trace file %s: line not written", self.appender.path)

    # -- reading ---------------------------------------------------------------------------------------------

    def _entries(self, where: str, params: tuple[Any, ...], limit: int) -> list[TraceEntry]:
        rows = self.db.query(f"{_ENTRY_SQL}{where} ORDER BY t.id DESC LIMIT ?", (*params, limit))
        return [decode_entry(_blob(r[0])) for r in rows]

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
        row = self.db.query_one(f"SELECT {', '.join(_STATS)} FROM trace_stats WHERE id = 1")
        return {k: int(row[k]) if row else 0 for k in _STATS}

    def sessions(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.db.query(
            "SELECT session_id, count(*) AS n, min(ts_ns) AS first, max(ts_ns) AS last,"
            f" {self.db.json_array_distinct('tool')} AS tools,"
            " (SELECT agent_id FROM traces f WHERE f.session_id = t.session_id ORDER BY f.id LIMIT 1)"
            " AS agent FROM traces t WHERE session_id != ''"
            " GROUP BY session_id ORDER BY last DESC, session_id LIMIT ?",
            (limit,),
        )
        return [
            {
                "session_id": r["session_id"],
                "agent_id": r["agent"],
                "event_count": int(r["n"]),
                "first_seen": format_timestamp(int(r["first"])),
                "last_seen": format_timestamp(int(r["last"])),
                "tools": json.loads(r["tools"]),
            }
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
        target.parent.mkdir(parents=True, exist_ok=True)
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
