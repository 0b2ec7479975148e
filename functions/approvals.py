"""Approvals over HTTP (CONTRACT 1.6, 1.8, 1.13): the queue a supervisor or a human works.
All control plane."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, get, post, put
from litestar.params import FromPath, FromQuery, RawBody

from flux7.functions.auth import actor_of, control_plane, mesh_of, principal_of, readers, resolvers
from flux7.functions.openapi import ADMIN, BODY, json_body, responses
from flux7.functions.schemas import (
    ApprovalSettings,
    ApprovalSettingsChange,
    ApprovalSettingsChanged,
    ApprovalView,
    DecisionsPage,
    PrecedentSettings,
    Resolve,
    ResolveRequest,
)
from flux7.shared.auth.identity import Principal
from flux7.shared.decisions.query import parse_decision_query
from flux7.shared.errors import BadRequest, Forbidden
from flux7.shared.gate.approvals import Approval
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
    guards=[readers],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    response_description="Approvals, newest first",
    responses=responses({}, 400, 401),
)
def list_approvals(
    request: Request[Any, Any, Any], status: FromQuery[str] = "pending", tool: FromQuery[str] = ""
) -> list[ApprovalView]:
    queue = mesh_of(request).approvals
    principal = principal_of(request)
    return [_view(a, principal, queue.expose_content) for a in queue.query(status=status, tool=tool)]


def _view(approval: Approval, principal: Principal, expose: bool) -> ApprovalView:
    """An approval as this principal sees it: `actionable` says whether they may decide it now."""
    out = approval.view(expose)
    if approval.status == "pending":
        out.actionable = _refusal(approval, principal) is None
    return out


def _refusal(approval: Approval, principal: Principal) -> str | None:
    """Why this principal may not decide this approval, or None when they may."""
    if not principal.may_decide(approval.tool, approval.agent_id):
        return f"{principal.actor} may not decide {approval.tool} for {approval.agent_id}: outside their scope"
    if principal.agent_id and principal.agent_id == approval.agent_id:
        return f"agent {principal.agent_id!r} cannot resolve its own approval"
    if principal.kind == "user" and principal.name == approval.requester_user:
        return f"user {principal.name!r} cannot decide a call made on their own behalf"
    if any(v.actor == principal.actor for v in approval.votes):
        return f"{principal.actor} has already voted on this approval"
    return None


@get(
    "/approvals/settings",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({}, 401),
    operation_id="ApprovalsSettingsGetSettings",
    summary="GetSettings",
)
def get_settings(request: Request[Any, Any, Any]) -> ApprovalSettings:
    mesh = mesh_of(request)
    store = mesh.approvals.settings_store
    effective = store.effective()
    return ApprovalSettings(
        settings=effective,
        config=mesh.settings.config_path,
        defaults=store.configured(),
        overrides=store.overrides(),
        editable=True,
        precedent=PrecedentSettings(
            enabled=effective.auto_approve,
            min_approvals=effective.min_approvals,
            auto_approve_writes=effective.auto_approve_writes,
        ),
    )


@put(
    "/approvals/settings",
    guards=[control_plane],
    operation_class=json_body(ApprovalSettingsChange),
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({}, *BODY, 401, 501, 503),
)
def put_settings(request: Request[Any, Any, Any], body: RawBody) -> ApprovalSettingsChanged:
    mesh = mesh_of(request)
    changes = json_object(body)
    by = actor_of(request, text_field(changes, "by"))
    changes.pop("by", None)
    changed = mesh.approvals.settings_store.update(changes, by=by)
    if changed:
        mesh.events.record(
            tool="mesh.approval_settings",
            actor=by,
            params={k: changes[k] for k in changed},
            policy_rule="approval_settings",
        )
    return ApprovalSettingsChanged(changed)


@get(
    "/approvals/decisions",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    response_description="Settled approvals",
    responses=responses({}, 400, 401),
)
def list_decisions(request: Request[Any, Any, Any]) -> DecisionsPage:
    """Settled approvals, filtered and paged on the server (docs/console.md, "Decisions"); 400 on a bad filter."""
    query = parse_decision_query(dict(request.query_params))
    queue = mesh_of(request).approvals
    items, total = queue.decisions(query)
    decisions = []
    for a in items:
        view = a.view(queue.expose_content)  # settled: its resolver_kind is there
        view.fact_key = f"decision.{a.tool}.{a.id}"
        decisions.append(view)
    return DecisionsPage(decisions=decisions, total=total, limit=query.limit, offset=query.offset)


@get(
    "/approvals/{approval_id:str}",
    guards=[readers],
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    response_description="The approval with recent_traces and active_grants",
    responses=responses({}, 400, 401, 404),
)
def approval_detail(request: Request[Any, Any, Any], approval_id: FromPath[str]) -> ApprovalView:
    mesh = mesh_of(request)
    approval = mesh.approvals.get(approval_id)
    out = _view(approval, principal_of(request), mesh.approvals.expose_content)
    out.recent_traces = [entry_to_wire(e) for e in mesh.tracer.query(agent=approval.agent_id, limit=10)]
    out.active_grants = [g.view() for g in mesh.grants.active_for_agent(approval.agent_id)]
    return out


def acting_agent(request: Request[Any, Any, Any]) -> str:
    """The agent a control-plane request acts as: "" with the admin token (an operator), else the agent its
    credential names (a supervisor's token or JWT, a claim in the open-loopback mode). No agent settles its own
    approval or grants itself, whichever credential it holds."""
    return principal_of(request).agent_id


def _resolve(request: Request[Any, Any, Any], approval_id: str, body: bytes, decision: str) -> Resolve:
    fields = json_object(body)
    confidence = fields.get("confidence")
    if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, int | float)):
        raise BadRequest("confidence must be a number")
    principal = principal_of(request)
    queue = mesh_of(request).approvals
    target = queue.get(approval_id)
    if not principal.may_decide(target.tool, target.agent_id):
        raise Forbidden(f"{principal.actor} may not decide {target.tool} for {target.agent_id}: outside their scope")
    resolved_by, note = principal.resolution(text_field(fields, "resolved_by"))
    approval = queue.resolve(
        target.id,
        decision,
        resolved_by=resolved_by,
        note=note,
        resolver=principal.agent_id,
        reasoning=text_field(fields, "reasoning"),
        confidence=float(confidence) if confidence is not None else None,
        human=principal.human,
        user=principal.name if principal.kind == "user" else "",
    )
    out = Resolve(status=approval.status, id=approval.id)
    if approval.required_approvals > 1:  # four eyes: how far the approval is
        out.approvals, out.required_approvals = approval.approved_votes, approval.required_approvals
    return out


@post(
    "/approvals/{approval_id:str}/approve",
    guards=[resolvers],
    status_code=200,
    operation_class=json_body(ResolveRequest),
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({}, *BODY, 401, 404, 409, 503),
)
def approve(request: Request[Any, Any, Any], approval_id: FromPath[str], body: RawBody) -> Resolve:
    return _resolve(request, approval_id, body, "approve")


@post(
    "/approvals/{approval_id:str}/deny",
    guards=[resolvers],
    status_code=200,
    operation_class=json_body(ResolveRequest),
    sync_to_thread=True,
    tags=["approvals"],
    security=ADMIN,
    responses=responses({}, *BODY, 401, 404, 409, 503),
)
def deny(request: Request[Any, Any, Any], approval_id: FromPath[str], body: RawBody) -> Resolve:
    return _resolve(request, approval_id, body, "deny")


ROUTES = [list_approvals, list_decisions, get_settings, put_settings, approval_detail, approve, deny]
