"""The filters and the page of `GET /approvals/decisions`, validated once (docs/console.md, "Decisions").

A decision is a settled approval: approved, denied or timed out, by a human, a supervisor, a precedent (mem7) or
the system. Every filter is optional; a bad value is a BadRequest that names the parameter and what it accepts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import msgspec

from flux7.shared.errors import BadRequest
from flux7.shared.globs import glob_match, is_exact

__all__ = ["KINDS", "MAX_LIMIT", "OUTCOMES", "DecisionQuery", "kind_sql", "parse_decision_query"]

OUTCOMES = ("approved", "denied", "timeout")
KINDS = ("human", "supervisor", "mem7", "system")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_PARAMS = ("agent", "tool", "outcome", "resolver", "since", "until", "trace", "limit", "offset")


def _kind_of(column: str) -> str:
    who = f"lower(trim({column}))"
    return (
        f"CASE WHEN {who} = 'supervisor:mem7' THEN 'mem7' "
        f"WHEN substr({who}, 1, 7) = 'system:' THEN 'system' "
        f"WHEN substr({who}, 1, 11) = 'supervisor:' OR substr({who}, 1, 5) = 'auto:' "
        f"OR substr({who}, 1, 4) = 'bot:' OR substr({who}, 1, 4) = 'mcp:' THEN 'supervisor' "
        "ELSE 'human' END"
    )


# decisions.resolver_kind in SQL, so the resolver filter pages in the database (a test holds the two together):
# the resolver's kind, unless it is a human's and the note says a machine acted through that credential.
kind_sql = (
    f"CASE WHEN ({_kind_of('resolved_by')}) = 'human' AND resolved_note != '' THEN ({_kind_of('resolved_note')}) "
    f"ELSE ({_kind_of('resolved_by')}) END"
)


class DecisionQuery(msgspec.Struct, frozen=True, kw_only=True):
    agent: str = ""  # exact, or a glob
    tool: str = ""  # exact, or a glob
    outcome: str = ""  # one of OUTCOMES
    resolver: str = ""  # one of KINDS
    since: float | None = None  # epoch seconds, resolution time, inclusive
    until: float | None = None  # exclusive
    trace: str = ""  # the trace id of the decided call
    limit: int = DEFAULT_LIMIT
    offset: int = 0

    def where(self, names: Callable[[str], list[str]] | None = None) -> tuple[list[str], list[Any]]:
        """SQL conditions and their parameters. `names(column)` lists the distinct values of `agent_id` or
        `tool`, to turn a glob into the exact names it matches (the reference's glob, not SQLite's)."""
        where: list[str] = ["status != 'pending'"]
        params: list[Any] = []
        for column, pattern in (("agent_id", self.agent), ("tool", self.tool)):
            if not pattern:
                continue
            if is_exact(pattern) or names is None:
                where.append(f"{column} = ?")
                params.append(pattern)
                continue
            matched = [n for n in names(column) if glob_match(pattern, n)]
            if not matched:
                where.append("1 = 0")  # matches nothing (a bare 0 is no boolean on PostgreSQL)
                continue
            where.append(f"{column} IN ({', '.join('?' * len(matched))})")
            params.extend(matched)
        if self.outcome:
            where.append("status = ?")
            params.append(self.outcome)
        if self.resolver:
            where.append(f"({kind_sql}) = ?")
            params.append(self.resolver)
        if self.since is not None:
            where.append("resolved_at >= ?")
            params.append(self.since)
        if self.until is not None:
            where.append("resolved_at < ?")
            params.append(self.until)
        if self.trace:
            where.append("trace_id = ?")
            params.append(self.trace)
        return where, params


def _time(name: str, text: str) -> float:
    """RFC 3339 (a zone is required) or epoch milliseconds."""
    if text.isdigit():
        return int(text) / 1000
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{name} must be an RFC 3339 time (2026-01-31T12:00:00Z) or epoch milliseconds") from None
    if parsed.tzinfo is None:
        raise BadRequest(f"{name} needs a time zone (Z or +hh:mm): {text!r}")
    return parsed.timestamp()


def _count(name: str, text: str, low: int, high: int | None) -> int:
    if not text.isdigit():
        raise BadRequest(f"{name} must be a whole number, not {text!r}")
    value = int(text)
    if value < low or (high is not None and value > high):
        raise BadRequest(f"{name} must be between {low} and {high}" if high else f"{name} must be at least {low}")
    return value


def parse_decision_query(query: Mapping[str, str]) -> DecisionQuery:
    """The query string of GET /approvals/decisions. Unknown parameters are refused, so a typo never lists all."""
    unknown = sorted(k for k in query if k not in _PARAMS)
    if unknown:
        raise BadRequest(f"unknown parameter {unknown[0]!r}; known: {', '.join(_PARAMS)}")
    text = {k: str(v).strip() for k, v in query.items()}
    outcome = text.get("outcome", "")
    if outcome and outcome not in OUTCOMES:
        raise BadRequest(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    resolver = text.get("resolver", "")
    if resolver and resolver not in KINDS:
        raise BadRequest(f"resolver must be one of {', '.join(KINDS)}, not {resolver!r}")
    since = _time("since", text["since"]) if text.get("since") else None
    until = _time("until", text["until"]) if text.get("until") else None
    if since is not None and until is not None and until <= since:
        raise BadRequest("until must be later than since")
    trace = text.get("trace", "")
    if trace and not all(c in "0123456789abcdef" for c in trace.lower()):
        raise BadRequest("trace must be a hex trace id")
    return DecisionQuery(
        agent=text.get("agent", ""),
        tool=text.get("tool", ""),
        outcome=outcome,
        resolver=resolver,
        since=since,
        until=until,
        trace=trace.lower(),
        limit=_count("limit", text["limit"], 1, MAX_LIMIT) if text.get("limit") else DEFAULT_LIMIT,
        offset=_count("offset", text["offset"], 0, None) if text.get("offset") else 0,
    )
