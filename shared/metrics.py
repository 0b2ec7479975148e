"""Prometheus metrics (CONTRACT 1.12 plus call, latency and approval series), kept in SQLite so every worker
process adds to, and reports, the same numbers."""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Mapping
from typing import Any

from .db import Database, sqlite3

__all__ = ["ACTIONS", "COUNTERS", "HISTOGRAMS", "PREFIX", "Metrics"]

log = logging.getLogger("flux7.metrics")

PREFIX = "agent_mesh_"

# name -> (help, label names)
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "agent_mesh_mem7_writes_attempted_total": ("Total mem7 decision write attempts.", ()),
    "agent_mesh_mem7_writes_succeeded_total": ("Successful mem7 decision writes (HTTP 2xx/3xx).", ()),
    "agent_mesh_mem7_writes_failed_total": (
        "Failed mem7 decision writes (marshal, transport, or HTTP >= 400).",
        (),
    ),
    "agent_mesh_calls_total": ("Governed tool calls by policy action.", ("action",)),
}
# Label values always shown (at 0), so a dashboard sees every series before the first call of its kind.
ACTIONS = ("allow", "deny", "human_approval", "rate_limited", "halted")

# name -> (help, bucket upper bounds)
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    "agent_mesh_upstream_latency_seconds": (
        "Latency of upstream tool calls (HTTP, MCP, CLI), in seconds.",
        (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    ),
}
PENDING_GAUGE = "agent_mesh_approvals_pending"
PENDING_HELP = "Approvals waiting for a decision."


def _canonical(name: str) -> str:
    return name if name.startswith(PREFIX) else PREFIX + name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{_escape(str(labels[k]))}"' for k in sorted(labels))


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


class Metrics:
    """Counters and histograms as rows of `metric_values`. `inc`/`observe` take an open write connection when
    the caller already holds a transaction (so a metric moves with the write it counts)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def inc(self, name: str, labels: Mapping[str, str] | None = None, by: float = 1, *, conn: Any = None) -> None:
        full = _canonical(name)
        spec = COUNTERS.get(full)
        if spec is None:
            raise ValueError(f"unknown counter {name!r}: declare it in shared.metrics.COUNTERS")
        given = dict(labels or {})
        if set(given) != set(spec[1]):
            raise ValueError(f"counter {full} takes labels {list(spec[1])}, got {sorted(given)}")
        if by < 0:
            raise ValueError("a counter only goes up")
        self._add([(full, _labels(given), float(by))], conn)

    def observe(self, name: str, value: float, *, conn: Any = None) -> None:
        full = _canonical(name)
        spec = HISTOGRAMS.get(full)
        if spec is None:
            raise ValueError(f"unknown histogram {name!r}: declare it in shared.metrics.HISTOGRAMS")
        value = float(value)
        if math.isnan(value):
            return
        bounds = spec[1]
        i = bisect.bisect_left(bounds, value)  # the smallest bound >= value; past the end is +Inf
        le = _le(bounds[i]) if i < len(bounds) else "+Inf"
        self._add(
            [(f"{full}_bucket", f'le="{le}"', 1.0), (f"{full}_sum", "", value), (f"{full}_count", "", 1.0)],
            conn,
        )

    def _add(self, rows: list[tuple[str, str, float]], conn: Any) -> None:
        sql = (
            "INSERT INTO metric_values (name, labels, value) VALUES (?, ?, ?)"
            " ON CONFLICT (name, labels) DO UPDATE SET value = value + excluded.value"
        )
        if conn is not None:
            conn.executemany(sql, rows)
            return
        with self.db.write() as c:
            c.executemany(sql, rows)

    def values(self) -> dict[tuple[str, str], float]:
        return {(r[0], r[1]): float(r[2]) for r in self.db.query("SELECT name, labels, value FROM metric_values")}

    def pending_approvals(self) -> int:
        """Pending approvals, 0 while the approvals table does not exist yet."""
        if self.db.query_one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'approvals'") is None:
            return 0
        try:
            row = self.db.query_one("SELECT count(*) FROM approvals WHERE status = 'pending'")
        except sqlite3.Error as e:
            log.warning("metrics: cannot count pending approvals: %s", e)
            return 0
        return int(row[0]) if row else 0

    def render(self, pending_approvals: int | None = None) -> str:
        """Prometheus text exposition, version 0.0.4."""
        if pending_approvals is None:
            pending_approvals = self.pending_approvals()
        values = self.values()
        out: list[str] = []
        for name, (help_text, label_names) in COUNTERS.items():
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            if not label_names:
                out.append(f"{name} {_num(values.get((name, ''), 0))}")
                continue
            series = {labels for (n, labels) in values if n == name}
            if label_names == ("action",):
                series |= {_labels({"action": a}) for a in ACTIONS}
            for labels in sorted(series):
                out.append(f"{name}{{{labels}}} {_num(values.get((name, labels), 0))}")
        for name, (help_text, bounds) in HISTOGRAMS.items():
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
            cumulative = 0.0
            for bound in (*bounds, math.inf):
                cumulative += values.get((f"{name}_bucket", f'le="{_le(bound)}"'), 0)
                out.append(f'{name}_bucket{{le="{_le(bound)}"}} {_num(cumulative)}')
            out.append(f"{name}_sum {_num(values.get((f'{name}_sum', ''), 0))}")
            out.append(f"{name}_count {_num(values.get((f'{name}_count', ''), 0))}")
        out += [
            f"# HELP {PENDING_GAUGE} {PENDING_HELP}",
            f"# TYPE {PENDING_GAUGE} gauge",
            f"{PENDING_GAUGE} {int(pending_approvals)}",
        ]
        return "\n".join(out) + "\n"
