"""Prometheus metrics (CONTRACT 1.12 plus call, RED, upstream and approval series), kept in SQLite so every
worker process adds to, and reports, the same numbers. The text is rendered by the official
`prometheus_client` exposition (a collector built from the database's rows at scrape time).

A serving worker (`Metrics.start`) sums its series in memory and writes them every `FLUSH_SECONDS`, in one
transaction of one statement per kind, and before it renders a scrape: writing a call's dozen rows in the call's
own trace transaction was a fifth of a lone governed call's CPU (docs/benchmarks.md). A scrape therefore shows its own
worker's calls at once and the other workers' within `FLUSH_SECONDS`; a worker killed with -9 loses at most that
long of its series (the trace and /health's counts, written with each call, lose nothing). Elsewhere (the CLI, a
test's in-process mesh that never starts) every write goes to the database as it happens.

Cardinality is bounded: `tool` and `agent` label values are admitted, in `metric_label_values`, up to
`metrics.max_tools` / `metrics.max_agents` distinct values (shared by every worker); later values are counted
under `other`. Outcomes (6), transports (4) and upstreams (the configured ones) are bounded by construction."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from flux7.shared import __version__
from flux7.shared.settings import MetricsSettings
from flux7.shared.store.db import Database
from flux7.shared.store.group_commit import UpsertSums

__all__ = [
    "ACTIONS",
    "CONTENT_TYPE",
    "COUNTERS",
    "HISTOGRAMS",
    "OTHER",
    "OUTCOMES",
    "PREFIX",
    "TRANSPORTS",
    "CallSample",
    "Metrics",
    "UpstreamState",
]

log = logging.getLogger("flux7.metrics")

PREFIX = "agent_mesh_"
# The Prometheus text format 0.0.4, once (prometheus_client's CONTENT_TYPE_PLAIN_0_0_4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "other"
FLUSH_SECONDS = 0.5  # how long a started worker holds its series in memory before writing them

# name -> (help, label names)
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "agent_mesh_mem7_writes_attempted_total": ("Total mem7 decision write attempts.", ()),
    "agent_mesh_mem7_writes_succeeded_total": ("Successful mem7 decision writes (HTTP 2xx/3xx).", ()),
    "agent_mesh_mem7_writes_failed_total": (
        "Failed mem7 decision writes (marshal, transport, or HTTP >= 400).",
        (),
    ),
    "agent_mesh_calls_total": ("Governed tool calls by policy action.", ("action",)),
    "agent_mesh_tool_calls_total": (
        "Governed tool calls by tool, agent and outcome (allow, deny, approval, error, rate_limited, halted).",
        ("tool", "agent", "outcome"),
    ),
    "agent_mesh_upstream_errors_total": (
        "Upstream calls that failed (unreachable, timed out, an error answer or a non-zero exit).",
        ("upstream", "source"),
    ),
}
# Label values always shown (at 0), so a dashboard sees every series before the first call of its kind.
ACTIONS = ("allow", "deny", "human_approval", "rate_limited", "halted")
OUTCOMES = ("allow", "deny", "approval", "error", "rate_limited", "halted")
TRANSPORTS = ("rest", "decide", "mcp", "stdio")

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_CALL = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

# name -> (help, label names, bucket upper bounds)
HISTOGRAMS: dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]] = {
    "agent_mesh_upstream_latency_seconds": (
        "Latency of upstream tool calls (HTTP, MCP, CLI), in seconds.",
        (),
        _LATENCY,
    ),
    "agent_mesh_tool_call_duration_seconds": (
        "Duration of governed tool calls by tool, agent and outcome, approval waits included, in seconds.",
        ("tool", "agent", "outcome"),
        _CALL,
    ),
    "agent_mesh_request_duration_seconds": (
        "Time the gateway took to answer a governed call, by transport (rest, decide, mcp, stdio), in seconds.",
        ("transport",),
        _CALL,
    ),
}
PENDING_GAUGE = "agent_mesh_approvals_pending"
PENDING_HELP = "Approvals waiting for a decision (pending and not yet expired)."
DELIVERIES_GAUGE = "agent_mesh_notify_deliveries"
DELIVERIES_HELP = (
    "Notification deliveries held in the outbox per lane (webhook, slack, email): queued (being tried) or failed "
    "(given up; GET /notifications/deliveries?status=failed)."
)
UP_GAUGE = "agent_mesh_upstream_up"
UP_HELP = (
    "1 when the upstream answers, 0 when it does not: MCP by this worker's connection; OpenAPI and CLI by "
    "the newest call through them (unreachable, timed out or 5xx is 0), and 0 while an OpenAPI spec URL fails."
)
BUILD_INFO = "flux7_build"
BUILD_HELP = "flux7 build information."

_ADD = (
    "INSERT INTO metric_values (name, labels, value) VALUES (?, ?, ?)"
    " ON CONFLICT (name, labels) DO UPDATE SET value = metric_values.value + excluded.value"
)
_SET = (
    "INSERT INTO metric_values (name, labels, value) VALUES (?, ?, ?)"
    " ON CONFLICT (name, labels) DO UPDATE SET value = excluded.value"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")
_OVERFLOW_MEMO = 4096  # refused label values remembered per process (beyond: asked again)


@dataclass(frozen=True)
class UpstreamState:
    """A configured upstream as this worker sees it. `live` is its connection's verdict (MCP: connected;
    OpenAPI: False while its spec URL fails), None when only calls can tell."""

    name: str
    source: str  # mcp | openapi | cli
    live: bool | None = None


class CallSample(msgspec.Struct, frozen=True, kw_only=True):
    """What one finished governed call adds: RED per tool/agent/outcome, the gateway's time per transport, and,
    when it reached an upstream, that upstream's latency, error count and up/down state."""

    tool: str
    agent: str
    outcome: str
    transport: str
    seconds: float
    upstream: str = ""
    source: str = ""
    upstream_seconds: float | None = None
    upstream_failed: bool = False
    upstream_down: bool = False


def _canonical(name: str) -> str:
    return name if name.startswith(PREFIX) else PREFIX + name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    """The stored form of a label set: `k="v"` pairs sorted by name (also the exposition's own form)."""
    return _label_text(tuple(labels.items()))


@functools.lru_cache(maxsize=8192)  # label sets are few (bounded by the caps); every call writes several
def _label_text(items: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(items))


_Hist = tuple[str, str, str, str, tuple[str, ...]]  # what _histogram_series returns


@functools.lru_cache(maxsize=8192)
def _histogram_series(full: str, bounds: tuple[float, ...], items: tuple[tuple[str, str], ...]) -> _Hist:
    """A histogram's row names (bucket, sum, count), its label set, and the label set of each bucket (the last
    is +Inf): worked out once per label set, an observation then only picks its bucket."""
    buckets = tuple(_label_text((*items, ("le", le))) for le in (*map(_le, bounds), "+Inf"))
    return f"{full}_bucket", f"{full}_sum", f"{full}_count", _label_text(items), buckets


_CALLS = "agent_mesh_calls_total"
_ACTION_TEXT = {a: _label_text((("action", a),)) for a in (*ACTIONS, "error")}
_TOOL_CALLS = "agent_mesh_tool_calls_total"
_TOOL_DURATION = "agent_mesh_tool_call_duration_seconds"
_REQUEST_DURATION = "agent_mesh_request_duration_seconds"
_UPSTREAM_LATENCY = "agent_mesh_upstream_latency_seconds"
# A call's held series: tool, agent, outcome, transport, its call-duration bucket and its upstream-latency bucket
# (-1: none), upstream, source, whether the upstream failed.
_TallyKey = tuple[str, str, str, str, int, int, str, str, bool]
_CALL_SERIES_MEMO = 8192  # (tool, agent, outcome, transport) sets remembered per process; bounded by the caps


@functools.lru_cache(maxsize=1024)  # bounded by the configured upstreams
def _upstream_labels(upstream: str, source: str) -> str:
    return _label_text((("upstream", upstream), ("source", source)))


def _parse_labels(text: str) -> dict[str, str]:
    unescape = {"n": "\n"}
    return {
        m.group(1): _UNESCAPE.sub(lambda e: unescape.get(e.group(1), e.group(1)), m.group(2))
        for m in _LABEL.finditer(text)
    }


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class _Families:
    """A prometheus_client collector over families built for one scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class Metrics:
    """Counters and histograms as rows of `metric_values`. Writers take an open write connection when the
    caller already holds a transaction (a new label value is admitted in it); once started, the rows themselves are
    held in memory and written by `flush` (see the module's text)."""

    def __init__(
        self,
        db: Database,
        settings: MetricsSettings | None = None,
        upstreams: Callable[[], Iterable[UpstreamState]] | None = None,
        deliveries: Callable[[], Mapping[tuple[str, str], int] | None] | None = None,
    ) -> None:
        self.db = db
        self._deliveries = deliveries or (lambda: None)  # (lane, status) -> rows; None: notifications are off
        cfg = settings or MetricsSettings()
        self.caps = {"tool": cfg.max_tools, "agent": cfg.max_agents}
        self._upstreams = upstreams or (lambda: ())
        self._admitted: dict[str, set[str]] = {"tool": set(), "agent": set()}
        self._refused: dict[str, set[str]] = {"tool": set(), "agent": set()}
        self._series_memo: dict[tuple[str, str, str, str], tuple[str, _Hist, _Hist]] = {}
        # Held series (a started worker): summed additions and last-wins values, not written yet.
        self._held = False
        self._sums = UpsertSums(add=_ADD, put=_SET)
        # A held call's additive series, per label set and bucket: (calls, seconds, upstream seconds), expanded
        # into rows when written. One entry touched per call, not a dozen rows summed (docs/benchmarks.md).
        self._tallies: dict[_TallyKey, list[float]] = {}
        self._held_lock = threading.Lock()  # the event loop adds, a scrape's thread flushes
        self._flusher: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    # -- holding in memory (a serving worker) --------------------------------------------------------------

    def start(self) -> None:
        """Hold the series in memory from now on and write them every FLUSH_SECONDS (on the running loop)."""
        self._held = True
        if self._flusher is None:
            self._stopping = asyncio.Event()
            self._flusher = asyncio.get_running_loop().create_task(self._flush_every(self._stopping))

    async def stop(self) -> None:
        """Stop holding: write what is held, and write every later series as it happens."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            self._stopping.set()
            await flusher  # a flush under way ends first: the database stays open until it has
        self._held = False
        self.flush()

    async def _flush_every(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), FLUSH_SECONDS)
            if not self._sums and not self._tallies:
                continue
            try:
                # On a thread: another worker holding the write lock must not stall this one's loop.
                await asyncio.to_thread(self.flush)
            except Exception as e:  # kept, summed, for the next round
                log.warning("metrics: held series not written yet: %s", e)

    def flush(self) -> None:
        """Write the held series, in one transaction; on failure they stay held (and the error is raised)."""
        with self._held_lock:
            tallies, self._tallies = self._tallies, {}
            if tallies:
                self._sums.add(self._expanded(tallies))
            sums, self._sums = self._sums, UpsertSums(add=_ADD, put=_SET)
        if not sums:
            return
        try:
            with self.db.write() as conn:
                sums.write(conn)
        except BaseException:
            with self._held_lock:
                sums.then(self._sums)  # what was held meanwhile is newer
                self._sums = sums
            raise

    def _hold(self, add: list[tuple[str, str, float]], put: list[tuple[str, str, float]]) -> None:
        with self._held_lock:
            self._sums.add(add)
            self._sums.put(put)

    # -- writing ------------------------------------------------------------------------------------------

    def inc(self, name: str, labels: Mapping[str, str] | None = None, by: float = 1, *, conn: Any = None) -> None:
        full = _canonical(name)
        spec = COUNTERS.get(full)
        if spec is None:
            raise ValueError(f"unknown counter {name!r}: declare it in flux7.shared.metrics.COUNTERS")
        given = dict(labels or {})
        if set(given) != set(spec[1]):
            raise ValueError(f"counter {full} takes labels {list(spec[1])}, got {sorted(given)}")
        if by < 0:
            raise ValueError("a counter only goes up")
        self._write([(full, _labels(given), float(by))], [], conn)

    def count_action(self, action: str, *, conn: Any = None) -> None:
        """`inc("calls_total", {"action": action})`, what every governed call adds, without its checks (the
        counter and its one label are known) and with the label text remembered."""
        text = _ACTION_TEXT.get(action)
        if text is None:
            text = _labels({"action": action})
        self._write([(_CALLS, text, 1.0)], [], conn)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None, *, conn: Any = None) -> None:
        full = _canonical(name)
        spec = HISTOGRAMS.get(full)
        if spec is None:
            raise ValueError(f"unknown histogram {name!r}: declare it in flux7.shared.metrics.HISTOGRAMS")
        given = dict(labels or {})
        if set(given) != set(spec[1]):
            raise ValueError(f"histogram {full} takes labels {list(spec[1])}, got {sorted(given)}")
        self._write(self._observation(full, spec[2], float(value), given), [], conn)

    @staticmethod
    def _observation(
        full: str, bounds: tuple[float, ...], value: float, labels: dict[str, str]
    ) -> list[tuple[str, str, float]]:
        if math.isnan(value):
            return []
        bucket, total, count, plain, buckets = _histogram_series(full, bounds, tuple(labels.items()))
        i = bisect.bisect_left(bounds, value)  # the smallest bound >= value; past the end is +Inf
        return [
            (bucket, buckets[i], 1.0),  # one row per bucket, not cumulative
            (total, plain, value),
            (count, plain, 1.0),
        ]

    def record_call(self, sample: CallSample, *, conn: Any = None) -> None:
        """One finished call's series: inside the caller's transaction when given; held, when this worker holds
        its series and knows the call's label values; otherwise in a transaction of their own."""
        if conn is not None:
            self._record(conn, sample)
        elif self._held and self._known("tool", sample.tool) and self._known("agent", sample.agent):
            self._record(None, sample)  # nothing to admit, nothing written now: no transaction
        else:
            with self.db.write() as c:
                self._record(c, sample)

    def _record(self, conn: Any, sample: CallSample) -> None:
        tool = self._admit(conn, "tool", sample.tool)
        agent = self._admit(conn, "agent", sample.agent)
        seconds, up = sample.seconds, sample.upstream_seconds
        i = -1 if math.isnan(seconds) else bisect.bisect_left(_CALL, seconds)  # both call histograms' bucket
        j = -1 if up is None or math.isnan(up) else bisect.bisect_left(_LATENCY, up)
        upstream, source = sample.upstream, sample.source
        key: _TallyKey = (tool, agent, sample.outcome, sample.transport, i, j, upstream, source, sample.upstream_failed)
        put = [(UP_GAUGE, _upstream_labels(upstream, source), 0.0 if sample.upstream_down else 1.0)] if upstream else []
        if not self._held:
            self._write(self._expanded({key: [1.0, seconds, up or 0.0]}), put, conn)
            return
        with self._held_lock:
            tally = self._tallies.get(key)
            if tally is None:
                self._tallies[key] = [1.0, seconds, up or 0.0]
            else:
                tally[0] += 1.0
                tally[1] += seconds
                tally[2] += up or 0.0
            if put:
                self._sums.put(put)

    def _expanded(self, tallies: Mapping[_TallyKey, list[float]]) -> list[tuple[str, str, float]]:
        """The rows of tallied calls: the RED counter, the two call-duration histograms, the upstream latency
        histogram and its error counter, each summed over the calls of one label set and bucket."""
        add: list[tuple[str, str, float]] = []
        for (tool, agent, outcome, transport, i, j, upstream, source, failed), (n, seconds, up) in tallies.items():
            red_text, by_tool, by_transport = self._call_series(tool, agent, outcome, transport)
            add.append((_TOOL_CALLS, red_text, n))
            if i >= 0:
                for bucket, total, count, plain, buckets in (by_tool, by_transport):
                    add += ((bucket, buckets[i], n), (total, plain, seconds), (count, plain, n))
            if j >= 0:
                bucket, total, count, plain, buckets = _histogram_series(_UPSTREAM_LATENCY, _LATENCY, ())
                add += ((bucket, buckets[j], n), (total, plain, up), (count, plain, n))
            if upstream and failed:
                add.append(("agent_mesh_upstream_errors_total", _upstream_labels(upstream, source), n))
        return add

    def _known(self, label: str, value: str) -> bool:
        """Whether `_admit` answers for this value without the database."""
        return value in self._admitted[label] or value in self._refused[label]

    def _call_series(self, tool: str, agent: str, outcome: str, transport: str) -> tuple[str, _Hist, _Hist]:
        """The label texts of a call's RED counter and its two duration histograms, once per label set."""
        key = (tool, agent, outcome, transport)
        found = self._series_memo.get(key)
        if found is None:
            red = (("tool", tool), ("agent", agent), ("outcome", outcome))
            found = (
                _label_text(red),
                _histogram_series(_TOOL_DURATION, _CALL, red),
                _histogram_series(_REQUEST_DURATION, _CALL, (("transport", transport),)),
            )
            if len(self._series_memo) >= _CALL_SERIES_MEMO:
                self._series_memo.clear()
            self._series_memo[key] = found
        return found

    def _admit(self, conn: Any, label: str, value: str) -> str:
        """`value`, or `other` once the label holds its cap of distinct values. Asks the database only for a
        value this process has not seen; the caller's write transaction makes count-then-insert atomic."""
        if value in self._admitted[label]:
            return value
        if value in self._refused[label]:
            return OTHER
        known = conn.execute(
            "SELECT 1 FROM metric_label_values WHERE label = ? AND value = ?", (label, value)
        ).fetchone()
        if known is None:
            held = conn.execute("SELECT count(*) FROM metric_label_values WHERE label = ?", (label,)).fetchone()[0]
            if int(held) >= self.caps[label]:
                refused = self._refused[label]
                if len(refused) >= _OVERFLOW_MEMO:
                    refused.clear()
                refused.add(value)
                return OTHER
            # DO NOTHING: on PostgreSQL a trace write (serialised on the chain head, not the store-wide write
            # lock) may admit the same value at the same moment.
            conn.execute(
                "INSERT INTO metric_label_values (label, value) VALUES (?, ?) ON CONFLICT DO NOTHING", (label, value)
            )
        self._admitted[label].add(value)
        return value

    def _write(self, add: list[tuple[str, str, float]], put: list[tuple[str, str, float]], conn: Any) -> None:
        if self._held:
            self._hold(add, put)
            return
        # One row order for every writer: on PostgreSQL a trace write (serialised on the chain head) and another
        # write (on the store-wide lock) may update the same rows at once, and a shared order cannot deadlock.
        add.sort()
        put.sort()
        if conn is not None:
            conn.executemany(_ADD, add)
            conn.executemany(_SET, put)
            return
        with self.db.write() as c:
            c.executemany(_ADD, add)
            c.executemany(_SET, put)

    # -- reading ------------------------------------------------------------------------------------------

    def values(self) -> dict[tuple[str, str], float]:
        if self._held:
            try:
                self.flush()  # this worker's own calls are in the answer
            except Exception as e:
                log.warning("metrics: held series not written before the scrape: %s", e)
        return {(r[0], r[1]): float(r[2]) for r in self.db.query("SELECT name, labels, value FROM metric_values")}

    def pending_approvals(self, now: float | None = None) -> int:
        """Approvals still waiting now: pending and unexpired, whatever worker sweeps them (none may have yet).
        0 while the approvals table does not exist."""
        if not self.db.has_table("approvals"):
            return 0
        try:
            row = self.db.query_one(
                "SELECT count(*) FROM approvals WHERE status = 'pending' AND expires_at > ?",
                (time.time() if now is None else now,),
            )
        except Exception as e:
            if not self.db.is_error(e):
                raise
            log.warning("metrics: cannot count pending approvals: %s", e)
            return 0
        return int(row[0]) if row else 0

    def families(self, pending_approvals: int | None = None) -> list[Metric]:
        if pending_approvals is None:
            pending_approvals = self.pending_approvals()
        values = self.values()
        by_name: dict[str, dict[str, float]] = {}
        for (name, labels), value in values.items():
            by_name.setdefault(name, {})[labels] = value
        upstreams = list(self._upstreams())
        out: list[Metric] = []
        for name, (help_text, label_names) in COUNTERS.items():
            family = CounterMetricFamily(name, help_text, labels=label_names)
            series = dict.fromkeys(by_name.get(name, {}), 0.0)
            if name == "agent_mesh_calls_total":
                series.update({_labels({"action": a}): 0.0 for a in ACTIONS if _labels({"action": a}) not in series})
            if name == "agent_mesh_upstream_errors_total":
                for u in upstreams:
                    series.setdefault(_labels({"upstream": u.name, "source": u.source}), 0.0)
            if not label_names:
                series.setdefault("", 0.0)
            for labels in sorted(series):
                parsed = _parse_labels(labels)
                family.add_metric([parsed.get(k, "") for k in label_names], by_name.get(name, {}).get(labels, 0.0))
            out.append(family)
        for name, (help_text, label_names, bounds) in HISTOGRAMS.items():
            out.append(self._histogram(name, help_text, label_names, bounds, by_name))
        pending = GaugeMetricFamily(PENDING_GAUGE, PENDING_HELP)
        pending.add_metric([], int(pending_approvals))
        out.append(pending)
        out.append(self._up(upstreams, by_name.get(UP_GAUGE, {})))
        deliveries = self._deliveries()
        if deliveries is not None:
            held = GaugeMetricFamily(DELIVERIES_GAUGE, DELIVERIES_HELP, labels=("lane", "status"))
            for (lane, status), count in sorted(deliveries.items()):
                held.add_metric([lane, status], count)
            out.append(held)
        build = InfoMetricFamily(BUILD_INFO, BUILD_HELP)
        build.add_metric([], {"version": __version__})
        out.append(build)
        return out

    @staticmethod
    def _histogram(
        name: str,
        help_text: str,
        label_names: tuple[str, ...],
        bounds: tuple[float, ...],
        by_name: dict[str, dict[str, float]],
    ) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, help_text, labels=label_names)
        counts = by_name.get(f"{name}_count", {})
        sums = by_name.get(f"{name}_sum", {})
        buckets: dict[str, dict[str, float]] = {}
        for labels, value in by_name.get(f"{name}_bucket", {}).items():
            parsed = _parse_labels(labels)
            le = parsed.pop("le", "+Inf")
            buckets.setdefault(_labels(parsed), {})[le] = value
        series = set(counts) | set(buckets)
        if not label_names:
            series.add("")
        if label_names == ("transport",):
            series |= {_labels({"transport": t}) for t in TRANSPORTS}
        for labels in sorted(series):
            parsed = _parse_labels(labels)
            own = buckets.get(labels, {})
            cumulative = 0.0
            rows: list[tuple[str, float]] = []
            for bound in (*bounds, math.inf):
                cumulative += own.get(_le(bound), 0.0)
                rows.append((_le(bound), cumulative))
            family.add_metric([parsed.get(k, "") for k in label_names], rows, sums.get(labels, 0.0))
        return family

    @staticmethod
    def _up(upstreams: list[UpstreamState], stored: dict[str, float]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(UP_GAUGE, UP_HELP, labels=("upstream", "source"))
        for u in upstreams:
            if u.live is not None and (u.source == "mcp" or not u.live):
                up = u.live
            else:
                up = stored.get(_labels({"upstream": u.name, "source": u.source}), 1.0) > 0
            family.add_metric([u.name, u.source], 1.0 if up else 0.0)
        return family

    def render(self, pending_approvals: int | None = None) -> str:
        """Prometheus text exposition, version 0.0.4, by prometheus_client."""
        return generate_latest(_Families(self.families(pending_approvals))).decode()
