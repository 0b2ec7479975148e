"""Users and roles over HTTP (docs/security.md "Users and roles"): owners manage them, admins read them, and every
principal may ask who it is (`GET /me`, what the console shows and decides by)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, get, post
from litestar.params import FromPath, RawBody

from flux7.functions.approvals import json_object
from flux7.functions.auth import actor_of, control_plane, mesh_of, owners, principal_of, readers
from flux7.functions.openapi import ADMIN, BODY, json_body, responses
from flux7.functions.schemas import UserView
from flux7.shared.errors import BadRequest, Forbidden

__all__ = ["ROUTES"]


class UserRequest(msgspec.Struct, kw_only=True):
    name: str
    role: str
    approve_tools: list[str] = msgspec.field(default_factory=list)
    approve_agents: list[str] = msgspec.field(default_factory=list)
    email: str = ""


class Me(msgspec.Struct, kw_only=True):
    """Who the request's credential proves: its actor, role and scope (an approver's globs; empty means any)."""

    actor: str
    kind: str
    name: str
    role: str
    approve_tools: list[str]
    approve_agents: list[str]


def _list(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{key} must be a list of strings")
    return value


@get(
    "/me",
    guards=[readers],
    tags=["users"],
    security=ADMIN,
    responses=responses({}, 401),
)
async def me(request: Request[Any, Any, Any]) -> Me:
    """Who the request's credential proves: its actor, role and scope."""
    p = principal_of(request)
    return Me(
        actor=p.actor,
        kind=p.kind,
        name=p.name,
        role=p.role,
        approve_tools=list(p.approve_tools),
        approve_agents=list(p.approve_agents),
    )


@get(
    "/users",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["users"],
    security=ADMIN,
    responses=responses({}, 401, 403),
)
def list_users(request: Request[Any, Any, Any]) -> list[UserView]:
    principal = principal_of(request)
    if not principal.writes:
        raise Forbidden(f"{principal.actor} may not list users: an admin's or owner's task")
    return [u.view() for u in mesh_of(request).users.list()]


@post(
    "/users",
    guards=[owners],
    operation_class=json_body(UserRequest, required=True),
    sync_to_thread=True,
    tags=["users"],
    security=ADMIN,
    status_code=201,
    response_description="Created, with its personal token (shown once)",
    responses=responses({}, *BODY, 401, 403, 409),
)
def add_user(request: Request[Any, Any, Any], body: RawBody) -> UserView:
    fields = json_object(body)
    name, role = fields.get("name"), fields.get("role")
    if not isinstance(name, str) or not isinstance(role, str):
        raise BadRequest("name and role are required strings")
    email = fields.get("email", "")
    if not isinstance(email, str):
        raise BadRequest("email must be a string")
    by = actor_of(request)
    issued = mesh_of(request).users.add(
        name,
        role,
        approve_tools=_list(fields.get("approve_tools"), "approve_tools"),
        approve_agents=_list(fields.get("approve_agents"), "approve_agents"),
        email=email,
        by=by,
    )
    params = msgspec.to_builtins(issued.user.view())
    mesh_of(request).events.record(tool="mesh.user_add", actor=by, params=params, policy_rule="users")
    return issued.user.view(issued.token)


@post(
    "/users/{name:str}/disable",
    guards=[owners],
    status_code=200,
    sync_to_thread=True,
    tags=["users"],
    security=ADMIN,
    responses=responses({}, 400, 401, 403, 404),
)
def disable_user(request: Request[Any, Any, Any], name: FromPath[str]) -> UserView:
    user = mesh_of(request).users.disable(name)
    mesh_of(request).events.record(
        tool="mesh.user_disable", actor=actor_of(request), params={"name": name}, policy_rule="users"
    )
    return user.view()


@post(
    "/users/{name:str}/rotate",
    guards=[owners],
    status_code=200,
    sync_to_thread=True,
    tags=["users"],
    security=ADMIN,
    response_description="With the new personal token (shown once)",
    responses=responses({}, 400, 401, 403, 404, 409),
)
def rotate_user(request: Request[Any, Any, Any], name: FromPath[str]) -> UserView:
    issued = mesh_of(request).users.rotate(name)
    mesh_of(request).events.record(
        tool="mesh.user_rotate", actor=actor_of(request), params={"name": name}, policy_rule="users"
    )
    return issued.user.view(issued.token)


ROUTES = [me, list_users, add_user, disable_user, rotate_user]
