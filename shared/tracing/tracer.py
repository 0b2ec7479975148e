"""The Tracer: what the pipeline and the HTTP edge use — record, update, read, verify, export."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from flux7.shared.settings import Settings
from flux7.shared.store.db import Database
from flux7.shared.tracing.chain import JsonlAppender, Verifier, verify_files
from flux7.shared.tracing.entry import SessionView, TraceEntry, format_timestamp
from flux7.shared.tracing.otlp import OtlpExporter, entries_to_otlp, resource_attributes, spans_for
from flux7.shared.tracing.store import TraceStore

__all__ = ["MAX_FILE_BYTES", "Tracer"]

log = logging.getLogger("flux7.tracing")

MAX_FILE_BYTES = 10 * 1024 * 1024


class Tracer:
    """Built once per worker. Every worker of a deployment shares the SQLite file and the trace file, and they
    extend one chain: the head is taken inside the write transaction that stores the line."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        max_file_bytes: int = MAX_FILE_BYTES,
        exporter: OtlpExporter | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.key = settings.trace_key.encode() if settings.trace_key else None
        self.trace_file: Path | None = settings.resolve_path(settings.trace_file) if settings.trace_file else None
        appender = JsonlAppender(self.trace_file, max_file_bytes) if self.trace_file else None
        self.store = TraceStore(db, key=self.key, appender=appender)
        self.store.adopt_file_head()
        self.resource = resource_attributes(settings.otel_service_name, settings.otel_resource_attributes)
        self.exporter = exporter if exporter is not None else self._exporter_from(settings, self.resource)

    @staticmethod
    def _exporter_from(settings: Settings, resource: dict[str, str]) -> OtlpExporter | None:
        if settings.otel_disabled:
            return None
        endpoint = settings.otel_traces_endpoint or settings.otel_endpoint
        if not endpoint:
            return None
        if endpoint != "stdout" and not endpoint.startswith(("http://", "https://")):
            endpoint = str(settings.resolve_path(endpoint))
        ca = str(settings.resolve_path(settings.otel_ca_cert)) if settings.otel_ca_cert else ""
        return OtlpExporter(
            endpoint,
            full_url=bool(settings.otel_traces_endpoint),
            protocol=settings.otel_protocol,
            resource=resource,
            headers=settings.otel_headers,
            ca_cert=ca,
            insecure_skip_verify=settings.otel_insecure_skip_verify,
        )

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        seq, head = self.store.head()
        log.info("trace store ready (seq=%d head=%s file=%s)", seq, head, self.trace_file or "-")
        if self.exporter is not None:
            exp = self.exporter
            target = f"{exp.url} ({exp.protocol})" if exp.is_http else exp.endpoint
            log.info("otel: exporting spans to %s as service %s", target, self.resource["service.name"])
            await exp.start()

    async def stop(self) -> None:
        if self.exporter is not None:
            await self.exporter.stop()
        if self.store.appender is not None:
            self.store.appender.close()
        seq, head = self.store.head()
        # Logged so an external log holds a point to compare a verified head against (a truncated tail).
        log.info("trace chain closed (seq=%d head=%s)", seq, head)

    # -- writing ---------------------------------------------------------------------------------------------

    def record(
        self, entry: TraceEntry, also: Callable[[Any], None] | None = None, *, export: bool = True
    ) -> TraceEntry:
        """Durable on return: the row and the chained line are committed, the line is in the trace file.
        Returns the entry as stored (trace_id and timestamp filled when they were empty). `also(conn)` runs in
        the same write transaction. `export=False` for a row the call completes later with `update` (its spans
        leave then, once)."""
        stored = self.store.record(entry, also)
        if export:
            self._export(stored)
        return stored

    def begin(self, entry: TraceEntry, also: Callable[[Any], None] | None = None) -> int:
        """Store a call's intent before its upstream is called: durable on return (raises when it cannot be
        written, and the call must then be refused). Returns the row id its outcome revises. An intent carries
        status_code 0 until then, which `verify` and the console report as "outcome unknown". Not exported
        to OTLP: the spans leave with the outcome."""
        return self.store.begin(entry, also)[0]

    def record_in(self, conn: Any, entry: TraceEntry, *, export: bool = False) -> int:
        """A new call inside the caller's write transaction (an approval and its trace in one commit). Its
        spans leave with the call's last revision unless `export`."""
        row_id, stored = self.store.insert(conn, entry)
        if export:
            self._export(stored)
        return row_id

    def revise(
        self,
        row_id: int,
        changes: dict[str, Any],
        also: Callable[[Any], None] | None = None,
        *,
        export: bool = False,
    ) -> TraceEntry | None:
        """Append a revision of one call (its outcome); `export` sends its spans (a call's spans leave once)."""
        new = self.store.revise(row_id, changes, also)
        if new is not None and export:
            self._export(new)
        return new

    def update(
        self, trace_id: str, also: Callable[[Any], None] | None = None, *, export: bool = True, **changes: Any
    ) -> TraceEntry | None:
        """Append a new revision (approval outcome, backend status, latency) of the newest call with this id.
        Returns it, or None when no such trace exists. `also(conn)` runs in the same write transaction. The
        revision's spans are exported unless `export=False` (a call's spans leave once, when it is complete)."""
        new = self.store.update(trace_id, also, **changes)
        if new is not None and export:
            self._export(new)
        return new

    # -- grouped writes: committed with what other calls write meanwhile (shared/store/group_commit.py) -------------

    async def record_grouped(
        self, entry: TraceEntry, also: Callable[[Any], None] | None = None, *, export: bool = True
    ) -> TraceEntry:
        """`record`, in the next group commit: durable when it returns, as `record` is."""
        stored = (await self.store.begin_grouped(entry, also))[1]
        if export:
            self._export(stored)
        return stored

    def begin_grouped(
        self, entry: TraceEntry, also: Callable[[Any], None] | None = None
    ) -> Awaitable[tuple[int, TraceEntry]]:
        """`begin` (a call's intent), in the next group commit: durable when it resolves. (row id, the entry as
        stored: what `revise_grouped(current=...)` takes). The store's awaitable itself: no coroutine per call."""
        return self.store.begin_grouped(entry, also)

    def revise_grouped(
        self,
        row_id: int,
        changes: dict[str, Any],
        also: Callable[[Any], None] | None = None,
        *,
        export: bool = False,
        current: TraceEntry | None = None,
    ) -> Awaitable[TraceEntry | None]:
        """`revise` (a call's outcome), in the next group commit. `current`: the row's newest revision when the
        caller holds it (it wrote it, and nothing else revises a call in flight), so the store need not read it.
        Without an exporter (or `export`), the store's awaitable itself: no coroutine per call."""
        written = self.store.revise_grouped(row_id, changes, also, current)
        if export and self.exporter is not None:
            return self._exported(written)
        return written

    async def _exported(self, written: Awaitable[TraceEntry | None]) -> TraceEntry | None:
        new = await written
        if new is not None:
            self._export(new)
        return new

    def _export(self, entry: TraceEntry) -> None:
        if self.exporter is None:
            return
        try:
            self.exporter.export(spans_for(entry, self._parent_span(entry)))
        except Exception:  # the export is best effort; the trace is already durable
            log.exception("otel export failed for %s", entry.trace_id)

    def _parent_span(self, entry: TraceEntry) -> str:
        if not entry.parent_trace_id or entry.parent_span_id:
            return ""
        parent = self.store.get(entry.parent_trace_id)
        return parent.span_id if parent is not None else ""

    # -- reading ---------------------------------------------------------------------------------------------

    def get(self, trace_id: str) -> TraceEntry | None:
        return self.store.get(trace_id)

    def query(self, agent: str = "", tool: str = "", trace: str = "", limit: int = 100) -> list[TraceEntry]:
        """Newest first; exact-match filters; limit defaults to 100 and is capped at 1000."""
        limit = 100 if limit <= 0 else min(limit, 1000)
        return self.store.query(agent=agent, tool=tool, trace=trace, limit=limit)

    def counts(self) -> dict[str, int]:
        return self.store.counts()

    def sessions(self, limit: int = 50) -> list[SessionView]:
        return self.store.sessions(50 if limit <= 0 else min(limit, 1000))

    def session(self, session_id: str, limit: int = 200) -> list[TraceEntry]:
        return self.store.query(session=session_id, limit=200 if limit <= 0 else min(limit, 1000))

    def why(self, trace_id: str, depth: int = 10) -> list[TraceEntry]:
        return self.store.why(trace_id, 10 if depth <= 0 else min(depth, 50))

    def otlp(self, agent: str = "", tool: str = "", limit: int = 200) -> dict[str, Any]:
        entries = self.store.query(agent=agent, tool=tool, limit=200 if limit <= 0 else min(limit, 1000))
        parents: dict[str, str] = {}
        for e in entries:
            if e.parent_trace_id and not e.parent_span_id and e.parent_trace_id not in parents:
                parent = self.store.get(e.parent_trace_id)
                if parent is not None and parent.span_id:
                    parents[e.parent_trace_id] = parent.span_id
        return entries_to_otlp(entries, parents, self.resource)

    # -- integrity -------------------------------------------------------------------------------------------

    def verify(self) -> dict[str, Any]:
        """The /traces/verify report. With a trace file, the file (and its `.old`) is walked, and a file that
        ends before the database's head is a break (a truncated tail). Without one, the chain stored in SQLite
        is walked."""
        head_seq, _ = self.store.head()  # read first: lines written during the walk only lengthen the file
        out: dict[str, Any] = {"persistent": True}
        appender = self.store.appender
        if appender is not None:
            files = appender.files()
            out["files"] = [str(p) for p in files]
            try:
                v = verify_files(files, self.key)
            except OSError as e:
                # A file rotated away between listing and reading: walk again once.
                log.info("trace verify: %s; retrying", e)
                files = appender.files()
                out["files"] = [str(p) for p in files]
                v = verify_files(files, self.key)
            self._check_tail(v, head_seq, files)
        else:
            v = self.store.verify_stored(f"{self.db.label}#trace_lines")
            if v.brk is None and v.last_seq < head_seq:
                v.fail_at_end(
                    f"{self.db.label}#trace_lines",
                    v.lines + 1,
                    f"stored chain ends at seq {v.last_seq}, head is seq {head_seq}",
                )
        out["hmac"] = self.key is not None
        out["verified_at"] = format_timestamp(time.time_ns())
        out.update(v.report())
        # Not a break (the chain holds): calls authorised and possibly run whose outcome was never written.
        count, calls = self.store.outcome_unknown()
        if count:
            out["outcome_unknown"] = count
            out["outcome_unknown_calls"] = calls
        return out

    @staticmethod
    def _check_tail(v: Verifier, head_seq: int, files: list[Path]) -> None:
        # SQLite knows the head, so a truncated tail (which the chain alone cannot show) is caught here.
        if v.brk is not None or head_seq == 0 or v.last_seq >= head_seq:
            return
        if not files:
            v.fail_at_end("", 0, f"no trace file, but the store's head is seq {head_seq}")
            return
        with open(files[-1], "rb") as f:
            lines = sum(1 for _ in f)
        v.fail_at_end(
            str(files[-1]),
            lines + 1,
            f"file ends at seq {v.last_seq} but the store's head is seq {head_seq} (lines missing at the end)",
        )

    def export_jsonl(self, path: str | Path) -> int:
        """Re-create the chained JSONL from SQLite (after a restore). Returns the number of lines written."""
        return self.store.export_jsonl(path)
