"""Grants over HTTP (CONTRACT 1.9): list the active ones, create, revoke. All control plane."""

from __future__ import annotations

from typing import Any

from litestar import Request, delete, get, post
from litestar.params import FromPath, RawBody

from flux7.functions.approvals import acting_agent, json_object
from flux7.functions.auth import actor_of, control_plane, grantors, mesh_of, principal_of
from flux7.functions.openapi import ADMIN, BODY, json_body, responses
from flux7.functions.schemas import GrantRequest, GrantView, Resolve
from flux7.shared.durations import parse_duration
from flux7.shared.errors import BadRequest, Forbidden

__all__ = ["ROUTES"]

_REQUIRED = "agent, tools, and duration are required"


def _str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if isinstance(value, list) and len(value) == 1:  # a one-glob list is the glob
        value = value[0]
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    return value.strip()


@get(
    "/grants",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["grants"],
    security=ADMIN,
    response_description="Active grants",
    responses=responses({}, 401),
    operation_id="GrantsListGrants",
    summary="ListGrants",
)
def list_grants(request: Request[Any, Any, Any]) -> list[GrantView]:
    return [g.view() for g in mesh_of(request).grants.active()]


@post(
    "/grants",
    guards=[grantors],
    operation_class=json_body(GrantRequest, required=True),
    sync_to_thread=True,
    tags=["grants"],
    security=ADMIN,
    status_code=201,
    response_description="Created",
    responses=responses({}, *BODY, 401, 503),
)
def create_grant(request: Request[Any, Any, Any], body: RawBody) -> GrantView:
    fields = json_object(body)
    agent, tools, duration = _str(fields, "agent"), _str(fields, "tools"), _str(fields, "duration")
    if not agent or not tools or not duration:
        raise BadRequest(_REQUIRED)
    try:
        seconds = parse_duration(duration)
    except ValueError as e:
        raise BadRequest(f"invalid duration: {e}") from None
    if seconds <= 0:
        raise BadRequest(f'invalid duration: "{duration}" is not positive')
    principal = principal_of(request)
    # an approver grants within its scope only: each of its globs must cover the grant's globs as written
    if not principal.writes and not principal.may_decide(tools, agent):
        raise Forbidden(f"{principal.actor} may not grant {tools} to {agent}: outside their scope")
    grant = mesh_of(request).grants.create(
        agent,
        tools,
        seconds,
        granted_by=actor_of(request),
        approval_id=_str(fields, "approval_id"),
        trace_id=_str(fields, "trace_id"),
        grantor=acting_agent(request),
    )
    return grant.view()


@delete(
    "/grants/{grant_id:str}",
    guards=[control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["grants"],
    security=ADMIN,
    response_description="`{status: revoked, id}`",
    responses=responses({}, 400, 401, 404, 503),
)
def revoke_grant(request: Request[Any, Any, Any], grant_id: FromPath[str]) -> Resolve:
    grant = mesh_of(request).grants.revoke(grant_id, by=actor_of(request))
    return Resolve(status="revoked", id=grant.id)


ROUTES = [list_grants, create_grant, revoke_grant]
