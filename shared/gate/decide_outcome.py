"""The outcome of a call the caller ran itself after `POST /decide` allowed it (the terminal agent's built-in tools).

`/decide` writes the call's trace row as its intent (policy, rule, approval); the caller runs the tool and reports
what happened (`POST /decide/{trace_id}/outcome`), which completes that same row: status, exit code, duration,
size, error. The trace and the console then show one call, decided and done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from flux7.shared.errors import BadRequest, Conflict, Forbidden, NotFound

if TYPE_CHECKING:
    from flux7.shared.mesh import Mesh

__all__ = ["OutcomeReport", "report_outcome"]

_MAX_ERROR = 2000  # characters of the caller's error text kept in the trace


class OutcomeReport(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ok: bool
    exit_code: int | None = None  # a command's exit status; absent for tools that have none
    bytes: int = 0  # the size of the tool's output
    duration_ms: float = 0.0  # how long the tool ran on the caller's side
    error: str = ""


def report_outcome(mesh: Mesh, trace_id: str, agent_id: str | None, report: OutcomeReport) -> Any:
    """Complete the `/decide` row `trace_id` with `report`; `agent_id` None is the admin. Returns the new revision.

    Refused: an unknown trace (404), another agent's call (403), a call that was not allowed to run or whose
    outcome the mesh already knows (409), numbers out of range (400)."""
    if report.bytes < 0 or report.duration_ms < 0 or report.duration_ms > 86_400_000:
        raise BadRequest("bytes and duration_ms must be non-negative (duration_ms at most a day)")
    tracer = mesh.tracer
    entry = tracer.get(trace_id)
    if entry is None:
        raise NotFound(f"no call with trace id {trace_id!r}")
    if agent_id is not None and entry.agent_id != agent_id:
        raise Forbidden(f"trace {trace_id} is another agent's call")
    if mesh.registry.lookup(entry.tool) is not None:
        raise Conflict(f"{entry.tool} is a mesh tool: the mesh ran it and knows its outcome")
    # A /decide row is revision 0 (or 1 once its approval was resolved); a higher one already has its outcome.
    if entry.revision > (1 if entry.approval_id else 0):
        raise Conflict(f"trace {trace_id} already has its outcome")
    allowed = entry.policy == "allow" or (entry.policy == "human_approval" and entry.approval_status == "approved")
    if not allowed or entry.status_code != 200:
        raise Conflict(f"trace {trace_id} was not allowed to run ({entry.policy}): there is no outcome to report")
    changes: dict[str, Any] = {
        "status_code": 200 if report.ok else 500,
        "latency_ms": entry.latency_ms + round(report.duration_ms),
        "error": report.error[:_MAX_ERROR] if not report.ok else "",
        "estimated_output_tokens": report.bytes // 4,  # the mesh's own estimate: four bytes a token
    }
    if report.exit_code is not None:
        changes["exit_code"] = report.exit_code
    if not report.ok and not changes["error"]:
        changes["error"] = "the tool failed"
    return tracer.update(trace_id, export=False, **changes)  # the decision's spans already left
