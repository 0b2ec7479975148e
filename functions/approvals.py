"""Approvals over HTTP (CONTRACT 1.6, 1.8, 1.13): the queue a supervisor or a human works.
All control plane."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, get, post, put
from litestar.params import FromPath, FromQuery, RawBody

from flux7.functions.auth import actor_of, control_plane, mesh_of, principal_of, resolvers
from flux7.functions.openapi import ADMIN, BODY, json_body, ok, responses
from flux7.functions.schemas import (
    ApprovalSettings,
    ApprovalSettingsChange,
    ApprovalSettingsChanged,
    ApprovalView,
    Resolve,
    ResolveRequest,
)
from flux7.shared.decisions.facts import resolver_kind
from flux7.shared.decisions.query import parse_decision_query
from flux7.shared.errors import BadRequest
from flux7.shared.json_depth import decode
from flux7.shared.tracing import entry_to_wire

__all__ = ["ROUTES", "acting_agent", "json_object", "text_field"]


def json_object(body: bytes) -> dict[str, Any]:
    """An optional JSON object body: empty means {} (the SDK's approve() posts none)."""
    if not body.strip():
        return {}
    try:
        value = decode(body)
    except msgspec.DecodeError:
        raise BadRequest("invalid JSON body") from None
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object")
    return value


def text_field(body: dict[str, Any], key: str, *, strip: bool = False) -> str:
    """An optional string field of a JSON object body ("" when absent); 400 when it is not a string."""
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    return value.strip() if strip else value


@get(
    "/approvals",
    guards=[resolvers],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(list[ApprovalView], "Approvals, newest first")}, 400, 401),
)
def list_approvals(
    request: Request[Any, Any, Any], status: FromQuery[str] = "pending", tool: FromQuery[str] = ""
) -> list[dict[str, Any]]:
    queue = mesh_of(request).approvals
    return [a.view(queue.expose_content) for a in queue.query(status=status, tool=tool)]


@get(
    "/approvals/settings",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(ApprovalSettings)}, 401),
    operation_id="ApprovalsSettingsGetSettings",
    summary="GetSettings",
)
def get_settings(request: Request[Any, Any, Any]) -> dict[str, Any]:
    mesh = mesh_of(request)
    store = mesh.approvals.settings_store
    effective = msgspec.structs.asdict(store.effective())
    return {
        "settings": effective,
        "config": mesh.settings.config_path,
        "defaults": msgspec.structs.asdict(store.configured()),
        "overrides": store.overrides(),
        "editable": True,
        "precedent": {
            "enabled": effective["auto_approve"],
            "min_approvals": effective["min_approvals"],
            "auto_approve_writes": effective["auto_approve_writes"],
        },
    }


@put(
    "/approvals/settings",
    guards=[control_plane],
    operation_class=json_body(ApprovalSettingsChange),
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(ApprovalSettingsChanged)}, *BODY, 401, 501, 503),
)
def put_settings(request: Request[Any, Any, Any], body: RawBody) -> dict[str, Any]:
    mesh = mesh_of(request)
    changes = json_object(body)
    by = actor_of(request, text_field(changes, "by"))
    changes.pop("by", None)
    changed = mesh.approvals.settings_store.update(changes, by=by)
    if changed:
        mesh.events.record(
            tool="mesh.approval_settings",
            agent_id=by,
            params={k: changes[k] for k in changed},
            policy_rule="approval_settings",
        )
    return {"changed": changed}


@get(
    "/approvals/decisions",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(dict[str, Any], "`{decisions, total, limit, offset}`: settled approvals")}, 400, 401),
)
def list_decisions(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """Settled approvals, filtered and paged on the server (docs/console.md, "Decisions"); 400 on a bad filter."""
    query = parse_decision_query(dict(request.query_params))
    queue = mesh_of(request).approvals
    items, total = queue.decisions(query)
    decisions = []
    for a in items:
        view = a.view(queue.expose_content)
        view["resolver_kind"] = resolver_kind(a.resolved_by, a.resolved_note)
        view["fact_key"] = f"decision.{a.tool}.{a.id}"
        decisions.append(view)
    return {"decisions": decisions, "total": total, "limit": query.limit, "offset": query.offset}


@get(
    "/approvals/{approval_id:str}",
    guards=[resolvers],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(ApprovalView, "The approval with recent_traces and active_grants")}, 400, 401, 404),
)
def approval_detail(request: Request[Any, Any, Any], approval_id: FromPath[str]) -> dict[str, Any]:
    mesh = mesh_of(request)
    approval = mesh.approvals.get(approval_id)
    out = approval.view(mesh.approvals.expose_content)
    recent = [entry_to_wire(e) for e in mesh.tracer.query(agent=approval.agent_id, limit=10)]
    if recent:
        out["recent_traces"] = recent
    grants = [g.view() for g in mesh.grants.active_for_agent(approval.agent_id)]
    if grants:
        out["active_grants"] = grants
    return out


def acting_agent(request: Request[Any, Any, Any]) -> str:
    """The agent a control-plane request acts as: "" with the admin token (an operator), else the agent its
    credential names (a supervisor's token or JWT, a claim in the open-loopback mode). No agent settles its own
    approval or grants itself, whichever credential it holds."""
    return principal_of(request).agent_id


def _resolve(request: Request[Any, Any, Any], approval_id: str, body: bytes, decision: str) -> dict[str, Any]:
    fields = json_object(body)
    confidence = fields.get("confidence")
    if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, int | float)):
        raise BadRequest("confidence must be a number")
    principal = principal_of(request)
    resolved_by, note = principal.resolution(text_field(fields, "resolved_by"))
    approval = mesh_of(request).approvals.resolve(
        approval_id,
        decision,
        resolved_by=resolved_by,
        note=note,
        resolver=principal.agent_id,
        reasoning=text_field(fields, "reasoning"),
        confidence=float(confidence) if confidence is not None else None,
    )
    return {"status": approval.status, "id": approval.id}


@post(
    "/approvals/{approval_id:str}/approve",
    guards=[resolvers],
    status_code=200,
    operation_class=json_body(ResolveRequest),
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(Resolve)}, *BODY, 401, 404, 409, 503),
)
def approve(request: Request[Any, Any, Any], approval_id: FromPath[str], body: RawBody) -> dict[str, Any]:
    return _resolve(request, approval_id, body, "approve")


@post(
    "/approvals/{approval_id:str}/deny",
    guards=[resolvers],
    status_code=200,
    operation_class=json_body(ResolveRequest),
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({200: ok(Resolve)}, *BODY, 401, 404, 409, 503),
)
def deny(request: Request[Any, Any, Any], approval_id: FromPath[str], body: RawBody) -> dict[str, Any]:
    return _resolve(request, approval_id, body, "deny")


ROUTES = [list_approvals, list_decisions, get_settings, put_settings, approval_detail, approve, deny]
