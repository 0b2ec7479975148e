"""MemoryService: the eight tools over one store, with the same answers on every transport (CONTRACT 2.3).

`call_tool` returns (text, is_error): a failed tool is a result with isError, never a protocol error.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from flux7.shared.errors import Flux7Error
from flux7.shared.memory import texts
from flux7.shared.memory.config import MemoryConfig, config_from_settings
from flux7.shared.memory.index import Fact, ReadFilter
from flux7.shared.memory.scopes import Scopes
from flux7.shared.memory.search import Searcher, SearchRequest, VectorSlot, VectorSource, default_vectors
from flux7.shared.memory.sse import SseSessions
from flux7.shared.memory.store import MemoryStore
from flux7.shared.memory.times import parse_moment, parse_rfc3339, rfc3339
from flux7.shared.memory.tools import TOOLS
from flux7.shared.memory.workspace import Entry, go_trim
from flux7.shared.settings import Settings
from flux7.shared.store.db import Database

__all__ = ["Caller", "MemoryService", "ToolError", "memory_service_for"]

log = logging.getLogger("flux7.memory")

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
IDENTITY_META = "art.flux7/agent"
REMINDER = (
    "Context compaction is imminent. Before losing detail, persist any important state into mem7 with "
    "memory_store(key, value[, tags, agent]). Use descriptive keys. Long-term facts go to the workspace ; "
    "ephemeral session state can carry a TTL."
)


class ToolError(Exception):
    """A tool failure: its text goes back as a result with isError."""


class Caller(msgspec.Struct, frozen=True):
    trace: str = ""  # from _meta.traceparent
    identity: str = ""  # from _meta["art.flux7/agent"], only on an authenticated request


# Arguments as the reference reads them: a value of the wrong JSON type counts as absent.
def _str(args: dict[str, Any], key: str) -> str:
    v = args.get(key)
    if not isinstance(v, str):
        return ""
    if "\x00" in v:  # no path, key or text column takes one (PostgreSQL refuses it, open() raises)
        raise ToolError(f"{key} must not contain a NUL byte")
    return v


def _num(args: dict[str, Any], key: str) -> float | None:
    v = args.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _positive(args: dict[str, Any], key: str, default: int) -> int:
    v = _num(args, key)
    return int(v) if v is not None and v > 0 else default


def _tags(args: dict[str, Any], key: str = "tags") -> list[str]:
    v = args.get(key)
    tags = [t for t in v if isinstance(t, str)] if isinstance(v, list) else []
    if any("\x00" in t for t in tags):
        raise ToolError(f"{key} must not contain a NUL byte")
    return tags


def _moment(args: dict[str, Any], key: str) -> int | None:
    text = _str(args, key)
    if not text:
        return None
    moment = parse_moment(text)
    if moment is None:
        raise ToolError(f"invalid {key}: {text} (want YYYY-MM-DD or RFC3339)")
    return moment


def _single_line(what: str, *values: str) -> None:
    if any("\n" in v or "\r" in v for v in values):
        raise ToolError(f"{what} must be a single line")


class MemoryService:
    def __init__(
        self,
        config: MemoryConfig,
        db: Database,
        *,
        clock: Callable[[], float] = time.time,
        vectors: Callable[[Database], VectorSource | None] | None = None,
    ) -> None:
        self.config = config
        self.db = db
        self.clock = clock
        self.scopes = Scopes.load(config.scopes_file) if config.scopes_file else None
        self.store = MemoryStore(
            db,
            Path(config.dir),
            chain_key=config.chain_key.encode(),
            max_entries=config.max_entries,
            clock=clock,
            text_search_config=config.text_search_config,
        )
        self.store.open()
        self.vectors = VectorSlot(db, config.hybrid, vectors or self._configured_vectors)
        self.searcher = Searcher(
            self.store.index, self.vectors, self._configured_reranker(), min_similarity=config.min_similarity
        )
        self.sse = SseSessions(db)
        self._tools: dict[str, Callable[[dict[str, Any], Caller], str]] = {
            "memory_store": self._store,
            "memory_recall": self._recall,
            "memory_search": self._search,
            "memory_context": self._context,
            "memory_get": self._get,
            "memory_list": self._list,
            "memory_forget": self._forget,
            "memory_history": self._history,
        }

    def _configured_vectors(self, db: Database) -> VectorSource | None:
        c = self.config
        return default_vectors(db, url=c.embed_url, model=c.embed_model, provider=c.embed_provider, key=c.embed_key)

    def _configured_reranker(self) -> Any:
        if not self.config.rerank_url:
            return None
        from flux7.shared.memory.rerank import default_reranker

        return default_reranker(self.config.rerank_url, self.config.rerank_model or None)

    @property
    def token(self) -> str:
        return self.config.token

    @property
    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def caller(self, meta: dict[str, Any] | None, *, authenticated: bool) -> Caller:
        meta = meta if isinstance(meta, dict) else {}
        trace = ""
        m = _TRACEPARENT.fullmatch(str(meta.get("traceparent") or ""))
        if m and m.group(1) != "0" * 32:
            trace = m.group(1)
        identity = meta.get(IDENTITY_META) if authenticated else None
        return Caller(trace=trace, identity=identity.strip() if isinstance(identity, str) else "")

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        authenticated: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> tuple[str, bool]:
        tool = self._tools.get(name)
        if tool is None:
            return f"unknown tool: {name}", True
        try:
            return tool(arguments or {}, self.caller(meta, authenticated=authenticated)), False
        except ToolError as e:
            return str(e), True
        except Flux7Error as e:
            return e.message, True
        except Exception:
            log.exception("memory tool %s failed", name)
            return f"{name} failed: internal error", True

    # --- scopes ---

    def _scoped(self, caller: Caller) -> bool:
        return self.scopes is not None and bool(caller.identity) and not self.scopes.is_admin(caller.identity)

    def _require_admin(self, caller: Caller, what: str) -> None:
        if self._scoped(caller):
            raise ToolError(f"scope: {caller.identity} may not {what} (admin only)")

    def _filter(self, args: dict[str, Any], caller: Caller, *, with_range: bool = False) -> ReadFilter:
        owners = None
        if self._scoped(caller):
            assert self.scopes is not None
            owners = self.scopes.readable(caller.identity, self.store.index.agents())
        since = until = None
        if with_range:  # like the reference, an unparsable bound is ignored
            since = parse_rfc3339(_str(args, "since")) if _str(args, "since") else None
            until = parse_rfc3339(_str(args, "until")) if _str(args, "until") else None
        return ReadFilter(
            now=int(self.clock()),
            tags=_tags(args),
            agent=_str(args, "agent"),
            owners=owners,
            valid_at=_moment(args, "valid_at"),
            as_of=_moment(args, "as_of"),
            since=since,
            until=until,
        )

    # --- tools ---

    def _store(self, args: dict[str, Any], caller: Caller) -> str:
        key, value = go_trim(_str(args, "key")), _str(args, "value")
        if not key or not value:
            raise ToolError("key and value are required")
        tags = [go_trim(t) for t in _tags(args) if go_trim(t)]
        agent = caller.identity or go_trim(_str(args, "agent"))
        _single_line("key", key)
        _single_line("tags and agent", agent, *tags)
        ttl_arg = _num(args, "ttl")
        ttl = int(ttl_arg) if ttl_arg is not None else 0
        if ttl < 0:
            raise ToolError("ttl must be >= 0 seconds")
        valid_from, valid_to = _moment(args, "valid_from"), _moment(args, "valid_to")
        if valid_to is not None and valid_to <= (valid_from if valid_from is not None else int(self.clock())):
            raise ToolError("valid_to must be after valid_from")
        if self._scoped(caller):
            owner = self.store.index.owner(key, int(self.clock()))
            if owner is not None and owner != caller.identity:
                raise ToolError(f"scope: {caller.identity} may not overwrite memories of {owner or '(none)'}")
        if not value.strip("\n"):
            raise ToolError("key and value are required")
        long_term = args.get("long_term")
        if long_term is not None and not isinstance(long_term, bool):
            raise ToolError("long_term must be true or false")
        outcome = self.store.store(
            key,
            value,
            tags=tags,
            agent=agent,
            ttl=ttl,
            trace=caller.trace,
            valid_from=valid_from,
            valid_to=valid_to,
            long_term=long_term,
        )
        visible = self.store.index.by_keys([outcome.key], ReadFilter(now=int(self.clock())))
        if outcome.key in visible:
            self.vectors.run("upsert", lambda v: v.upsert(outcome.key, visible[outcome.key].value))
        action = "created" if outcome.created else "updated"
        return f"Memory '{outcome.key}' {action} ({outcome.total} total entries)"

    def _recall(self, args: dict[str, Any], caller: Caller) -> str:
        flt = self._filter(args, caller)
        flt = msgspec.structs.replace(flt, entity=_str(args, "key"))
        facts = self.store.index.select(flt, limit=_positive(args, "limit", 10))
        if facts:
            with self.db.write() as conn:
                self.store.index.touch(conn, [f.id for f in facts], int(self.clock()))
        return texts.fact_blocks(facts)

    def _find(self, args: dict[str, Any], caller: Caller) -> list[Fact]:
        query = _str(args, "query")
        if not query.strip():
            raise ToolError("query is required")
        req = SearchRequest(
            query=query,
            mode=_str(args, "mode") or "raw",
            limit=_positive(args, "limit", 10),
            include_neighbors=args.get("include_neighbors") is True,
            neighbor_radius=_positive(args, "neighbor_radius", 1),
        )
        return self.searcher.search(req, self._filter(args, caller, with_range=True))

    def _search(self, args: dict[str, Any], caller: Caller) -> str:
        return texts.search_text(self._find(args, caller))

    def _context(self, args: dict[str, Any], caller: Caller) -> str:
        return texts.context_json(self._find(args, caller))

    def _get(self, args: dict[str, Any], caller: Caller) -> str:
        rel = _str(args, "path")
        if not rel:
            raise ToolError("path is required")
        self._require_admin(caller, "read workspace files")
        root = os.path.realpath(self.store.workspace)
        full = os.path.normpath(os.path.join(root, rel))

        def inside(p: str) -> bool:
            return p == root or p.startswith(root + os.sep)

        if os.path.isabs(rel) or not inside(full) or not inside(os.path.realpath(full)):
            raise ToolError("path escapes workspace")
        try:
            with open(full, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise ToolError(f"file not found: {rel}") from None
        except OSError as e:
            raise ToolError(f"open failed: {e.strerror or e}") from None
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        first, last = _positive(args, "from_line", 0), _positive(args, "to_line", 0)
        out: list[str] = []
        for number, raw in enumerate(lines, start=1):
            if first and number < first:
                continue
            if last and number > last:
                break
            out.append(raw.rstrip(b"\r").decode("utf-8", "replace") + "\n")
        return "".join(out) or "(empty range)"

    def _list(self, args: dict[str, Any], caller: Caller) -> str:
        return texts.list_text(self.store.index.select(self._filter(args, caller)))

    def _forget(self, args: dict[str, Any], caller: Caller) -> str:
        key, tags = go_trim(_str(args, "key")), [go_trim(t) for t in _tags(args) if go_trim(t)]
        agent = caller.identity or go_trim(_str(args, "agent"))
        if not key and not tags:
            raise ToolError("key or tags required")
        _single_line("key", key)
        _single_line("tags and agent", agent, *tags)
        if tags:
            self._require_admin(caller, "forget by tags")
        if key and self._scoped(caller):
            owner = self.store.index.owner(key, int(self.clock()))
            if owner is not None and owner != caller.identity:
                raise ToolError(f"scope: {caller.identity} may not forget memories of {owner or '(none)'}")
        removed, remaining = self.store.forget(key=key, tags=tags, agent=agent, trace=caller.trace)
        if removed:

            def drop(v: VectorSource) -> None:
                for k in removed:
                    v.delete(k)

            self.vectors.run("delete", drop)
        if not removed:
            return "No matching memories found."
        return f"Removed {len(removed)} memory(ies). {remaining} remaining."

    def _history(self, args: dict[str, Any], caller: Caller) -> str:
        key = go_trim(_str(args, "key"))
        if not key:
            raise ToolError("key is required")
        events: list[tuple[Entry, str]] = []
        live, tags = False, set[str]()
        for e in self.store.entries(containing=key):
            if e.op in ("", "store") and e.entity == key:
                events.append((e, "update" if live else "store"))
                live, tags = True, set(e.tags)
            elif e.op == "delete" and e.entity == key:
                events.append((e, "delete"))
                live = False
            elif e.op == "delete_tags" and live and e.tags and set(e.tags) <= tags:
                events.append((e, f"delete by tags {', '.join(e.tags)}"))
                live = False
        if self._scoped(caller):
            assert self.scopes is not None
            events = [(e, w) for e, w in events if self.scopes.may_read(caller.identity, e.agent)]
        return texts.history_lines(key, events)

    # --- the other methods ---

    def snapshot_reminder(self) -> dict[str, Any]:
        return {
            "reminder": REMINDER,
            "workspace": str(self.store.workspace),
            "memory_count": self.store.count(),
            "generated_at": rfc3339(int(self.clock())),
        }

    def chain(self) -> dict[str, Any]:
        report = self.store.verify()
        return {"holds": report.holds, "report": report.to_dict()}

    def rescan(self, progress: Any = None) -> int:
        count = self.store.rescan(progress)
        self.reindex_vectors()
        return count

    def reindex_vectors(self) -> None:
        def rebuild(v: VectorSource) -> None:
            v.clear()
            items = self.store.index.live_keys(int(self.clock()))
            batch = getattr(v, "upsert_many", None)
            for start in range(0, len(items), 256):
                chunk = items[start : start + 256]
                if batch is not None:
                    batch(chunk)
                else:
                    for key, value in chunk:
                        v.upsert(key, value)

        self.vectors.run("rebuild", rebuild)

    def close(self) -> None:
        self.db.close()


def memory_service_for(settings: Settings, db: Database) -> MemoryService | None:
    """flux7 serve's memory role over the shared database; None when it is off or lives elsewhere (memory.url)."""
    if not settings.memory.enabled or settings.memory.url:
        return None
    return MemoryService(config_from_settings(settings), db)
