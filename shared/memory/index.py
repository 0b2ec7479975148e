"""The index of the workspace (CONTRACT 2.3, 2.7, 2.8): bitemporal fact rows, tags, full-text search (FTS5 on
SQLite, tsvector on PostgreSQL: fts.py).

Every write function takes the connection of the caller's open write transaction; the same functions
replay the markdown on rescan, so a rebuilt index equals the one built by the writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from flux7.shared.memory.fts import TextSearch, text_search_for
from flux7.shared.memory.workspace import DEFAULT_PREDICATE, LONG_TERM_FILE, Entry
from flux7.shared.store.db import Database

__all__ = ["Fact", "FactIndex", "ReadFilter"]

_COLUMNS = (
    "entity, predicate, object, tags, agent, trace_id, ttl, expires_at, source_file, source_line, "
    "created_at, updated_at, deleted_at, valid_from, valid_to, tx_from, tx_to"
)
_FIELDS = (
    "f.id, f.entity, f.predicate, f.object, f.tags, f.agent, f.trace_id, f.ttl, f.source_file, "
    "f.source_line, f.created_at, f.updated_at, f.valid_from, f.valid_to, f.tx_from, f.tx_to"
)
_SELECT = f"SELECT {_FIELDS} FROM facts f"


class Fact(msgspec.Struct, kw_only=True):
    id: int
    entity: str
    predicate: str
    value: str
    tags: list[str]
    agent: str
    trace_id: str
    ttl: int
    source_file: str
    source_line: int
    created: int
    updated: int
    valid_from: int
    valid_to: int | None
    tx_from: int
    tx_to: int | None

    @property
    def long_term(self) -> bool:
        """Whether this version lives in MEMORY.md (never expires)."""
        return self.source_file == LONG_TERM_FILE


class ReadFilter(msgspec.Struct, kw_only=True):
    """What a read sees. `as_of` (belief time) and `valid_at` (world time) default to `now`."""

    now: int
    entity: str = ""
    tags: Sequence[str] = ()
    agent: str = ""
    owners: frozenset[str] | None = None  # scopes: the agents whose memories the caller may read
    valid_at: int | None = None
    as_of: int | None = None
    since: int | None = None
    until: int | None = None

    @property
    def narrows(self) -> bool:
        """Whether the filter leaves out more than what is simply not in force now."""
        return bool(
            self.entity
            or self.tags
            or self.agent
            or self.owners is not None
            or self.valid_at is not None
            or self.as_of is not None
            or self.since is not None
            or self.until is not None
        )

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if self.as_of is None:
            clauses.append("f.tx_to IS NULL")
        else:
            clauses.append("f.tx_from <= ? AND (f.tx_to IS NULL OR f.tx_to > ?)")
            params += [self.as_of, self.as_of]
        believed_at = self.now if self.as_of is None else self.as_of
        world_at = believed_at if self.valid_at is None else self.valid_at
        clauses.append("f.valid_from <= ? AND (f.valid_to IS NULL OR f.valid_to > ?)")
        params += [world_at, world_at]
        clauses.append("(f.expires_at IS NULL OR f.expires_at > ?)")
        params.append(believed_at)
        if self.entity:
            clauses.append("f.entity = ?")
            params.append(self.entity)
        if self.agent:
            clauses.append("f.agent = ?")
            params.append(self.agent)
        if self.owners is not None:
            clauses.append(f"f.agent IN ({','.join('?' * len(self.owners))})" if self.owners else "1 = 0")
            params += sorted(self.owners)
        for i, tag in enumerate(self.tags):
            # The first tag drives the query from the tag index (callers put the rarest first: see
            # MemoryIndex.select); the others are checked per candidate.
            if i == 0:
                clauses.append("f.id IN (SELECT fact_id FROM fact_tags WHERE tag = ?)")
            else:
                clauses.append("EXISTS (SELECT 1 FROM fact_tags ft WHERE ft.fact_id = f.id AND ft.tag = ?)")
            params.append(tag)
        if self.since is not None:
            clauses.append("f.updated_at >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("f.updated_at <= ?")
            params.append(self.until)
        return " AND ".join(clauses), params


def _fact(row: Any) -> Fact:
    return Fact(
        id=row[0],
        entity=row[1],
        predicate=row[2],
        value=row[3],
        tags=msgspec.json.decode(row[4]) if row[4] not in ("", "[]") else [],
        agent=row[5],
        trace_id=row[6],
        ttl=row[7],
        source_file=row[8],
        source_line=row[9],
        created=row[10],
        updated=row[11],
        valid_from=row[12],
        valid_to=row[13],
        tx_from=row[14],
        tx_to=row[15],
    )


def _tags_json(tags: Sequence[str]) -> str:
    return msgspec.json.encode(list(tags)).decode() if tags else "[]"


def _insert(conn: Any, values: dict[str, Any], tags: Sequence[str]) -> int:
    row = conn.execute(
        f"INSERT INTO facts ({_COLUMNS}) VALUES ({','.join('?' * 17)}) RETURNING id",
        tuple(values[c.strip()] for c in _COLUMNS.split(",")),
    ).fetchone()
    fact_id = int(row[0])
    conn.executemany("INSERT INTO fact_tags (fact_id, tag) VALUES (?, ?)", [(fact_id, t) for t in tags])
    return fact_id


class FactIndex:
    def __init__(self, db: Database, *, text_search_config: str = "simple") -> None:
        self.db = db
        self.text: TextSearch = text_search_for(db, text_search_config)

    # --- writes (inside the caller's transaction) ---

    def head(self, conn: Any, entity: str, now: int) -> Fact | None:
        """The newest believed, unexpired version of a key: what an upsert carries `created`/agent from."""
        row = conn.execute(
            f"{_SELECT} WHERE f.entity = ? AND f.tx_to IS NULL "
            "AND (f.expires_at IS NULL OR f.expires_at > ?) ORDER BY f.tx_from DESC, f.id DESC LIMIT 1",
            (entity, now),
        ).fetchone()
        return _fact(row) if row else None

    def owner(self, entity: str, now: int) -> str | None:
        row = self.db.query_one(
            "SELECT agent FROM facts WHERE entity = ? AND tx_to IS NULL "
            "AND (expires_at IS NULL OR expires_at > ?) ORDER BY tx_from DESC, id DESC LIMIT 1",
            (entity, now),
        )
        return None if row is None else str(row[0])

    def count(self, conn: Any, now: int) -> int:
        """Believed keys whose newest version has not expired."""
        row = conn.execute(
            "SELECT (SELECT COUNT(*) FROM memory_keys) - "
            "(SELECT COUNT(*) FROM memory_keys WHERE expires_at IS NOT NULL AND expires_at <= ?)",
            (now,),
        ).fetchone()
        return int(row[0])

    def apply(self, conn: Any, e: Entry) -> list[str]:
        """Replay one workspace entry; returns the keys a deletion removed."""
        if e.op in ("", "store"):
            self.apply_store(conn, e)
            return []
        if e.op == "delete":
            return [e.entity] if self.apply_delete(conn, e.entity, e.when) else []
        if e.op == "delete_tags":
            return self.apply_delete_tags(conn, e.tags, e.when)
        return []

    def apply_store(self, conn: Any, e: Entry) -> None:
        """A new version: close the believed versions it overlaps, keep their parts outside its validity."""
        tx = e.when
        vf = tx if e.valid_from is None else e.valid_from
        vt = e.valid_to
        for old in conn.execute(f"{_SELECT} WHERE f.entity = ? AND f.tx_to IS NULL", (e.entity,)).fetchall():
            old_fact = _fact(old)
            old_end = old_fact.valid_to
            if not ((vt is None or old_fact.valid_from < vt) and (old_end is None or old_end > vf)):
                continue
            conn.execute("UPDATE facts SET tx_to = ? WHERE id = ?", (tx, old_fact.id))
            if old_fact.valid_from < vf:
                self._reinsert(conn, old_fact.id, tx, old_fact.valid_from, vf)
            if vt is not None and (old_end is None or old_end > vt):
                self._reinsert(conn, old_fact.id, tx, vt, old_end)
        updated = e.updated if e.updated is not None else tx
        # A long-term entry never expires, whatever a hand edit put in its envelope.
        ttl = 0 if e.file == LONG_TERM_FILE else max(e.ttl, 0)
        expires = updated + ttl if ttl > 0 else None
        conn.execute(
            "INSERT INTO memory_keys (entity, expires_at) VALUES (?, ?) "
            "ON CONFLICT(entity) DO UPDATE SET expires_at = excluded.expires_at",
            (e.entity, expires),
        )
        _insert(
            conn,
            {
                "entity": e.entity,
                "predicate": e.predicate or DEFAULT_PREDICATE,
                "object": e.value,
                "tags": _tags_json(e.tags),
                "agent": e.agent,
                "trace_id": e.trace,
                "ttl": ttl,
                "expires_at": expires,
                "source_file": e.file,
                "source_line": e.line,
                "created_at": e.created if e.created is not None else updated,
                "updated_at": updated,
                "deleted_at": None,
                "valid_from": vf,
                "valid_to": vt,
                "tx_from": tx,
                "tx_to": None,
            },
            e.tags,
        )

    def _reinsert(self, conn: Any, fact_id: int, tx: int, valid_from: int, valid_to: int | None) -> None:
        """The part of a closed version that the new one does not cover, believed from `tx` on."""
        row = conn.execute(f"SELECT {_COLUMNS} FROM facts WHERE id = ?", (fact_id,)).fetchone()
        values = dict(zip([c.strip() for c in _COLUMNS.split(",")], row, strict=True))
        values.update(valid_from=valid_from, valid_to=valid_to, tx_from=tx, tx_to=None)
        # The row's tags column holds its tags in their order (fact_tags is their index, with no order of its own).
        tags = msgspec.json.decode(values["tags"]) if values["tags"] not in ("", "[]") else []
        _insert(conn, values, tags)

    def apply_delete(self, conn: Any, entity: str, when: int) -> bool:
        cur = conn.execute(
            "UPDATE facts SET tx_to = ?, deleted_at = ? WHERE entity = ? AND tx_to IS NULL",
            (when, when, entity),
        )
        conn.execute("DELETE FROM memory_keys WHERE entity = ?", (entity,))
        return int(cur.rowcount) > 0

    def apply_delete_tags(self, conn: Any, tags: Sequence[str], when: int) -> list[str]:
        if not tags:
            return []
        # The keys whose version in force at `when` carries every tag lose all their believed versions.
        where, params = ReadFilter(now=when, tags=tags).where()
        keys = sorted({r[0] for r in conn.execute(f"SELECT f.entity FROM facts f WHERE {where}", params)})
        return [key for key in keys if self.apply_delete(conn, key, when)]

    def reset(self, conn: Any) -> None:
        conn.execute("DELETE FROM fact_tags")
        conn.execute("DELETE FROM facts")
        conn.execute("DELETE FROM memory_keys")
        self.text.reset(conn)

    def prune(self, conn: Any, now: int) -> int:
        """Physically drop TTL-expired versions (the markdown keeps them)."""
        rows = conn.execute(
            "DELETE FROM facts WHERE expires_at IS NOT NULL AND expires_at <= ? RETURNING entity", (now,)
        ).fetchall()
        conn.execute("DELETE FROM memory_keys WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
        return len({r[0] for r in rows})

    def touch(self, conn: Any, ids: Iterable[int], now: int) -> None:
        conn.executemany(
            "UPDATE facts SET access_count = access_count + 1, last_accessed = ? WHERE id = ?",
            [(now, i) for i in ids],
        )

    # --- reads ---

    def _rarest_tag_first(self, flt: ReadFilter) -> ReadFilter:
        """Order the tags by how many facts carry them (counted up to a cap, so the cost stays bounded): an
        exact-tag list such as the precedent check's then touches only the rarest tag's facts."""
        if len(flt.tags) < 2:
            return flt
        cap = 2000
        sql = "SELECT count(*) FROM (SELECT 1 FROM fact_tags WHERE tag = ? LIMIT ?) AS capped"
        counts = {tag: int(self.db.query(sql, (tag, cap))[0][0]) for tag in set(flt.tags)}
        return msgspec.structs.replace(flt, tags=tuple(sorted(flt.tags, key=lambda t: (counts[t], t))))

    def select(self, flt: ReadFilter, *, limit: int = 0) -> list[Fact]:
        flt = self._rarest_tag_first(flt)
        where, params = flt.where()
        sql = f"{_SELECT} WHERE {where} ORDER BY f.updated_at DESC, f.id DESC"
        if limit > 0:
            sql += " LIMIT ?"
            params.append(limit)
        return [_fact(r) for r in self.db.query(sql, tuple(params))]

    def values_by_keys(self, keys: Sequence[str], flt: ReadFilter) -> dict[str, str]:
        """The value of the visible version of each key (as by_keys, without building whole facts)."""
        if not keys:
            return {}
        where, params = flt.where()
        rows = self.db.query(
            f"SELECT f.entity, f.object FROM facts f WHERE f.entity IN ({','.join('?' * len(keys))}) AND {where} "
            "ORDER BY f.updated_at ASC, f.id ASC",
            (*keys, *params),
        )
        return {r[0]: r[1] for r in rows}

    def by_keys(self, keys: Sequence[str], flt: ReadFilter) -> dict[str, Fact]:
        """The visible version of each key (the newest when several are)."""
        if not keys:
            return {}
        where, params = flt.where()
        rows = self.db.query(
            f"{_SELECT} WHERE f.entity IN ({','.join('?' * len(keys))}) AND {where} "
            "ORDER BY f.updated_at ASC, f.id ASC",
            (*keys, *params),
        )
        return {f.entity: f for f in map(_fact, rows)}

    def search(self, fts_query: str, flt: ReadFilter, *, limit: int) -> list[Fact]:
        """Relevance over (entity, predicate, object, tags) plus recency. Raises TextSearchError on a syntax error."""
        where, params = flt.where()
        return [_fact(r) for r in self.text.ranked(self.db, _FIELDS, fts_query, where, params, flt.now, limit)]

    def scored(self, fts_query: str, flt: ReadFilter, *, limit: int) -> list[tuple[str, float]]:
        """`search`'s ranking as (key, score), higher better, one row per key (its best version)."""
        where, params = flt.where()
        best: dict[str, float] = {}
        for key, score in self.text.ranked(self.db, "f.entity", fts_query, where, params, flt.now, limit):
            best.setdefault(key, float(score))
        return list(best.items())

    def agents(self) -> list[str]:
        return [r[0] for r in self.db.query("SELECT DISTINCT agent FROM facts WHERE tx_to IS NULL")]

    def live_keys(self, now: int) -> list[tuple[str, str]]:
        """(key, value) of every believed version valid now: what the vector index should hold."""
        flt = ReadFilter(now=now)
        where, params = flt.where()
        sql = f"SELECT f.entity, f.object FROM facts f WHERE {where} ORDER BY f.id"
        rows = self.db.query(sql, tuple(params))
        return [(r[0], r[1]) for r in rows]
