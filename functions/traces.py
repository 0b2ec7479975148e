"""Traces over HTTP (CONTRACT 1.6, 1.11): /traces, /traces/verify, /traces/{id}/why, /sessions, /otel-traces.
All control plane."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.params import FromPath, FromQuery

from flux7.functions.auth import control_plane, mesh_of
from flux7.functions.openapi import ADMIN, ok, responses
from flux7.functions.schemas import SessionView, TraceView, TraceWhy
from flux7.shared.errors import NotFound
from flux7.shared.tracing import entry_to_wire

__all__ = ["ROUTES"]


def _int(value: str, default: int) -> int:
    # The reference ignores a limit that is not a positive integer and uses the default.
    try:
        n = int(value)
    except ValueError:
        return default
    return n if n > 0 else default


def _tracer(request: Request[Any, Any, Any]) -> Any:
    return mesh_of(request).tracer


@get(
    "/traces",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["traces"],
    security=ADMIN,
    response_description="Trace entries, newest first",
    responses=responses({}, 400, 401),
)
def traces(
    request: Request[Any, Any, Any],
    agent: FromQuery[str] = "",
    tool: FromQuery[str] = "",
    trace: FromQuery[str] = "",
    limit: FromQuery[str] = "",
) -> list[TraceView]:
    found = _tracer(request).query(agent=agent, tool=tool, trace=trace, limit=min(_int(limit, 100), 1000))
    return [entry_to_wire(e) for e in found]


@get(
    "/traces/verify",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["traces"],
    security=ADMIN,
    responses=responses({200: ok(dict[str, Any], "The chain report; 200 even when broken")}, 401),
)
def traces_verify(request: Request[Any, Any, Any]) -> dict[str, Any]:
    # 200 even when broken: the report is the answer, and the caller decides what a break means.
    report: dict[str, Any] = _tracer(request).verify()
    return report


@get(
    "/traces/{trace_id:str}/why",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["traces"],
    security=ADMIN,
    responses=responses({}, 400, 401, 404),
)
def traces_why(request: Request[Any, Any, Any], trace_id: FromPath[str], depth: FromQuery[str] = "") -> TraceWhy:
    chain = _tracer(request).why(trace_id, min(_int(depth, 10), 50))
    if not chain:
        raise NotFound("trace not found")
    return TraceWhy(trace_id=trace_id, chain_length=len(chain), chain=[entry_to_wire(e) for e in chain])


@get(
    "/otel-traces",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["traces"],
    security=ADMIN,
    responses=responses({200: ok(dict[str, Any], "OTLP JSON `{resourceSpans: [...]}`")}, 400, 401),
)
def otel_traces(
    request: Request[Any, Any, Any],
    agent: FromQuery[str] = "",
    tool: FromQuery[str] = "",
    limit: FromQuery[str] = "",
) -> dict[str, Any]:
    result: dict[str, Any] = _tracer(request).otlp(agent=agent, tool=tool, limit=_int(limit, 200))
    return result


@get(
    "/sessions",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["traces"],
    security=ADMIN,
    response_description="Sessions, by last_seen desc",
    responses=responses({}, 400, 401),
)
def sessions(request: Request[Any, Any, Any], limit: FromQuery[str] = "") -> list[SessionView]:
    found: list[SessionView] = _tracer(request).sessions(_int(limit, 50))
    return found


@get(
    "/sessions/{session_id:str}",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["traces"],
    security=ADMIN,
    response_description="The session's entries, newest first",
    responses=responses({}, 400, 401),
)
def session(request: Request[Any, Any, Any], session_id: FromPath[str], limit: FromQuery[str] = "") -> list[TraceView]:
    return [entry_to_wire(e) for e in _tracer(request).session(session_id, _int(limit, 200))]


ROUTES = [traces, traces_verify, traces_why, otel_traces, sessions, session]
